"""seff: a job's CPU and memory efficiency, in the layout of Slurm's contribs/seff.

``seff [-d] JOBID`` (``A_T`` for an array task). From the job's accounting record: CPU
utilized = the CPU time (user + system) of all its steps, against wall-clock time x
allocated cores; memory utilized = the largest, over the steps, of the sum of the step's
task peaks (TRESUsageInTot mem), against the allocated memory. A job still running gets
Slurm's warning that figures are final only at the end; a pending one no efficiency at all.
Unknown job: ``Job not found.``, exit 2; bad usage: the usage text, exit 1 (seff's codes).
"""

from __future__ import annotations

import sys

from muster.cli import fmt_usage
from muster.cli.client import call, run_main



def time2str(secs: int) -> str:
    """seff's time2str: ``[D-]HH:MM:SS``."""
    secs = max(0, int(secs))
    days, rest = divmod(secs, 86400)
    text = f"{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def alloc_mem_mb(tres: str | None) -> float:
    """The ``mem=`` of a TRES string (``1G``, ``500M``, ``1.50T``), in MB; 0 when absent."""
    for item in (tres or "").split(","):
        key, _, value = item.partition("=")
        if key == "mem" and value:
            scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}
            unit = value[-1].upper()
            try:
                return float(value[:-1]) * scale[unit] if unit in scale else float(value)
            except ValueError:
                return 0
    return 0


def _parse_args(argv: list[str]) -> tuple[dict, list[str]]:
    """Perl's getopts('hvdf:'): bundled single-letter flags up to the first operand."""
    opts: dict = {}
    args = list(argv)
    while args and args[0].startswith("-") and args[0] != "-":
        word = args.pop(0)
        if word == "--":
            break
        i = 1
        while i < len(word):
            letter = word[i]
            if letter == "f":
                opts["f"] = word[i + 1:] or (args.pop(0) if args else "")
                break
            opts[letter] = True
            i += 1
    return opts, args


def report(job: dict, now: int, cluster: str, debug: bool = False) -> str:
    """The seff text of one accounting record (with its ``steps``)."""
    lines = []
    ncpus = int(job.get("num_cpus") or 0) or 1
    nnodes = int(job.get("num_nodes") or 0) or 1
    state = job.get("state", "")
    steps = job.get("steps") or []
    cput_ms = sum((s.get("usage") or {}).get(k, 0) for s in steps for k in ("user_ms", "sys_ms"))
    cput = cput_ms // 1000 + int((cput_ms % 1000) / 1000 + 0.5)
    mem_kb = maxmem = avemem = 0
    for s in steps:
        u = s.get("usage") or {}
        tot = ((u.get("in") or {}).get("tot") or {}).get("mem")
        if tot is not None and tot / 1024 > mem_kb:
            mem_kb = tot / 1024
            maxmem = u["in"]["max"].get("mem", 0)
            avemem = u["in"]["ave"].get("mem", 0)
    start = job.get("start_time")
    end = job.get("end_time") if state not in ("RUNNING", "COMPLETING", "SUSPENDED") else now
    walltime = max(0, (end or now) - start) if start else 0
    per_cpu = job.get("mem_per_cpu") is not None
    allocmem = alloc_mem_mb(job.get("tres_alloc")) * 1024
    if debug:
        lines.append("Slurm data: JobID ArrayJobID User Group State Clustername Ncpus Nnodes "
                     "Ntasks Reqmem PerNode Cput Walltime Mem ExitStatus")
        lines.append(f"Slurm data: {job['job_id']} {_array_id(job)} {job.get('user')} "
                     f"{job.get('group')} {state} {cluster} {ncpus} {nnodes} "
                     f"{int(alloc_mem_mb(job.get('tres_req')) * 1024)} {int(not per_cpu)} "
                     f"{cput} {walltime} {int(mem_kb)} {job.get('exit_code') or 0}")
        lines.append("")
    lines.append(f"Job ID: {job['job_id']}")
    if job.get("array_job_id") is not None and job.get("array_task_id") is not None:
        lines.append(f"Array Job ID: {_array_id(job)}")
    lines.append(f"Cluster: {cluster}")
    lines.append(f"User/Group: {job.get('user')}/{job.get('group')}")
    if state in ("PENDING", "RUNNING"):
        lines.append(f"State: {state}")
    else:
        lines.append(f"State: {state} (exit code {job.get('exit_code') or 0})")
    if ncpus == 1:
        lines.append(f"Cores: {ncpus}")
    else:
        lines.append(f"Nodes: {nnodes}")
        lines.append(f"Cores per node: {ncpus // nnodes}")
    if state == "PENDING":
        lines.append("Efficiency not available for jobs in the PENDING state.")
        return "".join(line + "\n" for line in lines)
    core_wall = walltime * ncpus
    cpu_eff = cput / core_wall * 100 if core_wall else 0.0
    lines.append(f"CPU Utilized: {time2str(cput)}")
    lines.append(f"CPU Efficiency: {cpu_eff:.2f}% of {time2str(core_wall)} core-walltime")
    lines.append(f"Job Wall-clock time: {time2str(walltime)}")
    lines.append(f"Memory Utilized: {fmt_usage.mem_str(mem_kb)}")
    mem_eff = mem_kb / allocmem * 100 if allocmem else 0.0
    share, unit = (allocmem / ncpus, "core") if per_cpu else (allocmem / nnodes, "node")
    lines.append(f"Memory Efficiency: {mem_eff:.2f}% of {fmt_usage.mem_str(allocmem)} "
                 f"({fmt_usage.mem_str(share)}/{unit})")
    if maxmem and avemem and maxmem > avemem:
        lines.append("The task which had the largest memory consumption differs by "
                     f"{maxmem / avemem * 100:.2f}% from the average task max memory consumption")
    if state == "RUNNING":
        lines.append("WARNING: Efficiency statistics can only be obtained after the job has "
                     "ended as seff tool is based on the accounting database data.")
    return "".join(line + "\n" for line in lines)


def _array_id(job: dict) -> str:
    if job.get("array_job_id") is None or job.get("array_task_id") is None:
        return ""
    return f"{job['array_job_id']}_{job['array_task_id']}"


def _find(jobs: list[dict], spec: str) -> dict | None:
    base, us, task = spec.partition("_")
    for j in jobs:
        if us and j.get("array_job_id") == int(base) and j.get("array_task_id") == int(task):
            return j
        if not us and (j["job_id"] == int(base) or j.get("array_job_id") == int(base)):
            return j
    return None


def _main() -> int:
    opts, args = _parse_args(sys.argv[1:])
    if opts.get("v") or opts.get("h") or len(args) != 1:  # seff's own texts, exit 1
        from muster.cli.getopt import InfoExit
        raise InfoExit("seff", "version" if opts.get("v") else "help")
    spec = args[0].partition(".")[0]
    base, us, task = spec.partition("_")
    if not base.isdigit() or (us and not task.isdigit()):
        sys.stderr.write("Job not found.\n")
        return 2
    reply = call({"op": "acct", "job_ids": [int(base)], "all_users": True})
    job = _find(reply.get("jobs") or [], spec)
    if job is None:
        sys.stderr.write("Job not found.\n")
        return 2
    sys.stdout.write(report(job, reply.get("now", 0), reply.get("cluster", ""),
                            debug=bool(opts.get("d"))))
    return 0


def main() -> None:
    run_main("seff", _main)


if __name__ == "__main__":
    main()
