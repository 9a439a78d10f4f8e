"""sstat: usage of running job steps (the latest samples of the nodes' usage accounting).

``sstat -j J[.S][,...]`` (or the ids as operands): ``S`` is ``batch``, ``extern`` or a step
number; without it the lowest numbered running step (else the batch step), or every running
step with ``-a``. ``-o/--format`` picks fields (a prefix of a name is enough, ``%N`` sets the
width, negative = left-justified), ``-p``/``-P`` print ``|``-separated, ``-n`` no header,
``--noconvert`` sizes in bytes, ``-e`` lists the fields. Users see their own jobs; operators
all. Messages and exit codes are Slurm's: a job the controller does not know is ``couldn't
get steps for job N``, a job with nothing running ``no steps running for job N``, a named
step that is not running prints nothing (Slurm logs it at debug level only).

The figures are the latest sample of each node (JobAcctGatherFrequency), aggregated by the
controller (muster.controller.usage); the layout is muster.cli.fmt_usage's. ``-i`` prints
JobID, Nodelist and Pids (the step's processes a node's latest sample saw, comma-separated)
once per node of each step.
"""

from __future__ import annotations

import sys

from muster.cli import fmt_usage
from muster.cli.client import call, run_main
from muster.cli.getopt import REQUIRED, CliExit, GetoptParser, OptSpec

PARSER = GetoptParser("sstat", [
    OptSpec("a", "allsteps"), OptSpec("e", "helpformat"), OptSpec("h", "help"),
    OptSpec("i", "pidformat"),
    OptSpec("j", "jobs", REQUIRED, action="append"), OptSpec("n", "noheader"),
    OptSpec("o", ("format", "fields"), REQUIRED, action="append"),
    OptSpec(None, "noconvert"), OptSpec("p", "parsable"), OptSpec("P", "parsable2"),
    OptSpec(None, "usage"), OptSpec("v", "verbose", action="count"), OptSpec("V", "version"),
], exit_code=1, hint=False, info="last")

DEFAULT_FIELDS = (
    "jobid,maxvmsize,maxvmsizenode,maxvmsizetask,avevmsize,maxrss,maxrssnode,maxrsstask,"
    "averss,maxpages,maxpagesnode,maxpagestask,avepages,mincpu,mincpunode,mincputask,avecpu,"
    "ntasks,avecpufreq,reqcpufreqmin,reqcpufreqmax,reqcpufreqgov,consumedenergy,maxdiskread,"
    "maxdiskreadnode,maxdiskreadtask,avediskread,maxdiskwrite,maxdiskwritenode,"
    "maxdiskwritetask,avediskwrite,tresusageinave,tresusageinmax,tresusageinmaxn,"
    "tresusageinmaxt,tresusageinmin,tresusageinminn,tresusageinmint,tresusageintot,"
    "tresusageoutave,tresusageoutmax,tresusageoutmaxn,tresusageoutmaxt,tresusageoutmin,"
    "tresusageoutminn,tresusageoutmint,tresusageouttot")


def _fixed(text: str):
    return lambda row, u, c: text if u is not None else ""


def _jobid(row, u, c):
    return f"{row['job_id']}.{row['step_id']}"


def _pids(row, u, c) -> str:
    """Slurm's Pids: the process ids of the row's nodes at their latest sample, node by
    node in node-list order, all comma-separated (``-i`` rows have one node each)."""
    pids = row.get("pids") or {}
    if not pids:
        return ""
    from muster.common.hostlist import expand
    return ",".join(str(p) for node in expand(row.get("node_list") or "")
                    for p in pids.get(node) or [])


# Slurm's field table, in its order (a requested prefix matches the first name it starts)
_OWN = {
    "AveCPUFreq": (10, _fixed("0")), "JobID": (-12, _jobid),
    "Nodelist": (20, lambda row, u, c: row.get("node_list") or ""),
    "NTasks": (8, lambda row, u, c: str(row.get("ntasks") or 0)),
    "Pids": (20, _pids),
    "ReqCPUFreq": (10, lambda row, u, c: "Unknown"),
    "ReqCPUFreqMin": (13, lambda row, u, c: "Unknown"),
    "ReqCPUFreqMax": (13, lambda row, u, c: "Unknown"),
    "ReqCPUFreqGov": (13, lambda row, u, c: "Unknown"),
}
_NAMES = (
    "AveCPU AveCPUFreq AveDiskRead AveDiskWrite AvePages AveRSS AveVMSize ConsumedEnergy "
    "ConsumedEnergyRaw JobID MaxDiskRead MaxDiskReadNode MaxDiskReadTask MaxDiskWrite "
    "MaxDiskWriteNode MaxDiskWriteTask MaxPages MaxPagesNode MaxPagesTask MaxRSS MaxRSSNode "
    "MaxRSSTask MaxVMSize MaxVMSizeNode MaxVMSizeTask MinCPU MinCPUNode MinCPUTask Nodelist "
    "NTasks Pids ReqCPUFreq ReqCPUFreqMin ReqCPUFreqMax ReqCPUFreqGov").split() + [
    f"TRESUsage{d}{k}" for d in ("In", "Out")
    for k in ("Ave", "Max", "MaxNode", "MaxTask", "Min", "MinNode", "MinTask", "Tot")]


def _field(name: str):
    if name in _OWN:
        return _OWN[name]
    width, get = fmt_usage.FIELDS[name]
    return width, lambda row, u, c: get(u, c)


def parse_fields(text: str) -> list[tuple[str, int, object]]:
    """``-o`` items -> [(name, width, getter)]; an unknown one is Slurm's error."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, pct, width = item.partition("%")
        match = next((n for n in _NAMES if n.lower().startswith(name.lower())), None)
        if match is None or not name:
            raise CliExit([f'sstat: error: Invalid field requested: "{name}"'], 1)
        default, getter = _field(match)
        w = default
        if pct:
            try:
                w = int(width) or default
            except ValueError:
                w = default
        out.append((match, w, getter))
    return out


def parse_jobs(specs: list[str]) -> list[dict]:
    """``J``, ``J.S``, ``J_T``, ``J_T.S`` (comma lists) -> request items."""
    out = []
    for spec in specs:
        for tok in spec.split(","):
            tok = tok.strip().strip("'\"")
            if not tok:
                continue
            head, dot, step = tok.partition(".")
            base, us, task = head.partition("_")
            ok_step = not dot or step.lower() in ("batch", "extern") or step.isdigit()
            if not base.isdigit() or (us and not task.isdigit()) or not ok_step:
                raise CliExit([f"sstat: fatal: Bad job/step specified: {tok}"], 1)
            item: dict = {"job_id": int(base)}
            if us:
                item["task"] = int(task)
            if dot:
                item["step"] = int(step) if step.isdigit() else step.lower()
            if item not in out:
                out.append(item)
    return out


def _cell(value: str, width: int) -> str:
    w = abs(width)
    if len(value) > w:
        value = value[:w - 1] + "+" if w > 0 else ""
    return value.ljust(w) if width < 0 else value.rjust(w)


def render(rows: list[dict], fields, *, parsable: bool = False, parsable2: bool = False,
           noheader: bool = False, noconvert: bool = False) -> str:
    ctx = {"noconvert": noconvert}
    lines = []
    if parsable or parsable2:
        end = "|" if parsable and not parsable2 else ""
        if not noheader:
            lines.append("|".join(n for n, _, _ in fields) + end)
        for r in rows:
            lines.append("|".join(g(r, r.get("usage"), ctx) for _, _, g in fields) + end)
    else:
        if not noheader:
            lines.append("".join(_cell(n, w) + " " for n, w, _ in fields))
            lines.append("".join("-" * abs(w) + " " for _, w, _ in fields))
        for r in rows:
            lines.append("".join(_cell(g(r, r.get("usage"), ctx), w) + " " for _, w, g in fields))
    return "".join(line + "\n" for line in lines)


ERRORS = {"no_job": "couldn't get steps for job {job}",
          "no_steps": "no steps running for job {job}",
          "denied": "problem getting step_layout for StepId={job}.{step}: "
                    "Access/permission denied"}


def _error(res: dict) -> str | None:
    code = res.get("error")
    if code not in ERRORS:
        return None  # not_running: Slurm says so at debug level only
    job = f"{res['job_id']}" + (f"_{res['task']}" if res.get("task") is not None else "")
    step = res.get("step")
    if code == "denied" and step is None:
        return f"couldn't get steps for job {job}: Access/permission denied"
    return ERRORS[code].format(job=job, step=step)


PID_FIELDS = "jobid,nodelist,pids"  # -i/--pidformat, before any -o fields


def by_node(rows: list[dict]) -> list[dict]:
    """-i/--pidformat: one line per node of each step, as Slurm lists a step's processes
    node by node: Pids are that node's processes at its latest sample (empty before the
    first one); the usage fields stay empty, as Slurm leaves them in this mode."""
    from muster.common.hostlist import expand
    return [{k: v for k, v in r.items() if k != "usage"} | {"node_list": node}
            for r in rows for node in expand(r.get("node_list") or "")]


def _help_fields() -> str:
    out = []
    for i, name in enumerate(_NAMES):
        out.append(("\n" if i and not i & 3 else (" " if i else "")) + f"{name:<17}")
    return "".join(out) + "\n"


def _main() -> int:
    opts, operands = PARSER.parse_into(sys.argv[1:])
    if opts.get("helpformat"):
        sys.stdout.write(_help_fields())
        return 0
    items = parse_jobs((opts.get("jobs") or []) + operands[:1])
    pidformat = bool(opts.get("pidformat"))
    fields = parse_fields(",".join(([PID_FIELDS] if pidformat else [])
                                   + (opts.get("format") or ([] if pidformat else [DEFAULT_FIELDS]))))
    if not items:
        raise CliExit(["sstat: error: You didn't give me any jobs to stat."], 1)
    reply = call({"op": "sstat", "steps": items, "all_steps": bool(opts.get("allsteps"))})
    rows: list[dict] = []
    errors: list[str] = []
    for item, res in zip(items, reply.get("results") or []):
        res.setdefault("task", item.get("task"))
        rows.extend(res.get("rows") or [])
        msg = _error(res)
        if msg:
            errors.append(f"sstat: error: {msg}")
    if pidformat:
        rows = by_node(rows)
    sys.stdout.write(render(rows, fields, parsable=bool(opts.get("parsable")),
                            parsable2=bool(opts.get("parsable2")),
                            noheader=bool(opts.get("noheader")),
                            noconvert=bool(opts.get("noconvert"))))
    if errors:
        sys.stdout.flush()
        raise CliExit(errors, 1)
    return 0


def main() -> None:
    run_main("sstat", _main)


if __name__ == "__main__":
    main()
