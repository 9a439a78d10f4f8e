"""The ``--help``, ``--usage`` and ``--version`` answers of every Muster command.

Standard library only, and imported only when one of those options is given
(:class:`muster.cli.getopt.InfoExit` imports it): a command run for real never pays for these
texts. The layouts (sections, option order, the column descriptions start in, the ``Usage:``
lines) are Slurm 22.05's, so that people and scripts find what they expect; the descriptions
are Muster's own and say what Muster does. An option Muster accepts but does not honour is
marked, as docs/options.md (muster.cli.optstatus) classifies it:

* ``[warned: why]`` — accepted; the command prints a warning and goes on without it;
* ``[refused: why]`` — the command or the controller refuses the request;
* ``[ignored: why]`` — accepted silently: it cannot change the outcome here.

Options Slurm's help shows but Muster's parsers do not accept are left out (listing them
would invite an ``unrecognized option`` error); options Muster accepts that Slurm's help does
not show are listed where Slurm's order puts them. tests/e2e/test_help_usage.py checks that
every option of every command's parser appears in its help.
"""

from __future__ import annotations

from muster import SLURM_COMPAT_VERSION

__all__ = ["answer", "version_line", "help_text", "usage_text"]

_COL = 30  # the column option descriptions start in (sbatch, srun, salloc)


def version_line() -> str:
    """What ``--version`` prints: ``slurm X.Y.Z`` with nothing after it, because tools split it
    on the blank (``awk '{print $2}'``) or match ``^slurm (\\d+)\\.(\\d+)\\.(\\d+)``."""
    return f"slurm {SLURM_COMPAT_VERSION}"


def _rows(rows, col: int = _COL) -> str:
    """Option rows as Slurm lays them out: the names, then the description from column
    ``col`` (after one blank when the names reach it); further description lines start in
    ``col`` too. A row whose description is empty is printed as it is (a section title)."""
    out = []
    for names, desc in rows:
        lines = desc.split("\n") if desc else [""]
        first = names if not lines[0] else (
            names.ljust(col) + lines[0] if len(names) < col else names + " " + lines[0])
        out.append(first)
        out.extend(" " * col + line for line in lines[1:])
    return "\n".join(out) + "\n"


# ---- sbatch / srun / salloc: the job options they share ------------------------------------

_JOB = {
    "account": ("  -A, --account=name", "account the job's usage is charged to"),
    "acctg-freq": ("      --acctg-freq=<datatype>=<interval>",
                   "[ignored: no accounting sampling]"),
    "bb": ("      --bb=<spec>", "burst buffer request [refused: no burst buffers]"),
    "bbf": ("      --bbf=<file_name>", "burst buffer file [refused: no burst buffers]"),
    "begin": ("  -b, --begin=time", "do not start the job before this time"),
    "comment": ("      --comment=name", "free text stored with the job"),
    "cpu-freq": ("      --cpu-freq=min[-max[:gov]]",
                 "[warned: no CPU frequency control]"),
    "cpus-per-task": ("  -c, --cpus-per-task=ncpus", "CPUs given to each task"),
    "dependency": ("  -d, --dependency=type:jobid[:time]",
                   "start only once the named jobs reach the state\n"
                   "the type names (after, afterok, afterany, ...)"),
    "deadline": ("      --deadline=time", "end the job in state DEADLINE when it can no longer\n"
                                          "finish by then (its --time-min, else its limit)"),
    "delay-boot": ("      --delay-boot=mins", "[ignored: nodes are never booted]"),
    "error": ("  -e, --error=err", "file the standard error goes to"),
    "gid": ("      --gid=group_id", "run the job under this group (root only)"),
    "gres": ("      --gres=list", "generic resources per node (gpu[:type]:N only)"),
    "gres-flags": ("      --gres-flags=opts", "[warned: no CPU-GPU affinity]"),
    "hold": ("  -H, --hold", "submit the job held (scontrol release starts it)"),
    "hint": ("      --hint=...", "[warned: Muster allocates CPUs, not sockets, cores\n"
                                 "or threads]"),
    "immediate": ("  -I, --immediate[=secs]", "give up unless the allocation starts at once\n"
                                              "(or within secs seconds)"),
    "input": ("  -i, --input=in", "file the standard input is read from"),
    "job-name": ("  -J, --job-name=jobname", "the job's name"),
    "no-kill": ("  -k, --no-kill", "[warned: a node failure ends the job (NODE_FAIL)]"),
    "licenses": ("  -L, --licenses=names", "[refused: Muster has no licenses]"),
    "clusters": ("  -M, --clusters=names", "cluster to run on: only this cluster's own name\n"
                                           "is accepted (also --cluster)"),
    "container": ("      --container=path", "run the tasks in this OCI bundle (oci.conf's\n"
                                            "runtime, default rootless runc)"),
    "container-image": ("      --container-image=image", "run the tasks in this image: an OCI\n"
                                                        "layout, a tarball, or docker://ref"),
    "container-mounts": ("      --container-mounts=SRC[:DST[:FLAGS]],...",
                         "bind mounts into the container (FLAGS: ro, rw, ...)"),
    "container-workdir": ("      --container-workdir=path", "working directory in the container"),
    "container-name": ("      --container-name=name", "a named container, reused by later\n"
                                                      "steps of the job"),
    "container-writable": ("      --container-writable", "a writable (private) root filesystem"),
    "container-readonly": ("      --container-readonly", "a read-only root filesystem"),
    "container-env": ("      --container-env=NAME,...", "variables whose host value wins over\n"
                                                       "the image's"),
    "container-mount-home": ("      --container-mount-home", "bind the home directory"),
    "no-container-mount-home": ("      --no-container-mount-home", "do not (the default)"),
    "container-remap-root": ("      --container-remap-root", "show the user as root inside"),
    "no-container-remap-root": ("      --no-container-remap-root", "the user's own ids inside\n"
                                                                   "(the default)"),
    "container-save": ("      --container-save=PATH", "save the container as a squashfs image\n"
                                                      "at the end (one per node)"),
    "distribution": ("  -m, --distribution=type", "how task ids are laid out on the nodes\n"
                                                  "(type = block|cyclic|arbitrary)"),
    "mail-type": ("      --mail-type=type", "mail on state changes: NONE, BEGIN, END, FAIL,\n"
                                            "REQUEUE, ALL, TIME_LIMIT[_90|_80|_50], ..."),
    "mail-user": ("      --mail-user=user", "address (or user name) the mail goes to"),
    "mcs-label": ("      --mcs-label=mcs", "[warned: no MCS plugin]"),
    "mem-bind": ("      --mem-bind=...", "[warned: no NUMA memory binding]"),
    "mpi": ("      --mpi=type", "[warned: no PMI server: start MPI programs with\n"
                                "their own launcher]"),
    "ntasks": ("  -n, --ntasks=ntasks", "number of tasks"),
    "network": ("      --network=type", "[warned: no network plugins]"),
    "nice": ("      --nice[=value]", "lower the job's priority by value (a negative\n"
                                     "value raises it: operators only)"),
    "ntasks-per-gpu": ("      --ntasks-per-gpu=n", "[warned: tasks are not derived from GPUs]"),
    "ntasks-per-node": ("      --ntasks-per-node=n", "tasks on each node"),
    "nodes": ("  -N, --nodes=N", "number of nodes (N = min[-max])"),
    "open-mode": ("      --open-mode=append|truncate", "how the output and error files\n"
                                                      "are opened"),
    "output": ("  -o, --output=out", "file the standard output goes to"),
    "overcommit": ("  -O, --overcommit", "one task's CPUs per node: tasks may outnumber\n"
                                         "the CPUs"),
    "partition": ("  -p, --partition=partition", "partition(s) to run in (comma list: the\n"
                                                 "first that can start the job)"),
    "power": ("      --power=flags", "[warned: no power management]"),
    "prefer": ("      --prefer=list", "[warned: no soft constraints (use --constraint)]"),
    "priority": ("      --priority=value", "give the job this priority (operators only)"),
    "profile": ("      --profile=value", "[warned: no profiling plugin]"),
    "propagate": ("      --propagate[=rlimits]", "[warned: resource limits are not propagated]"),
    "qos": ("  -q, --qos=qos", "quality of service"),
    "quiet": ("  -Q, --quiet", "print no informational messages"),
    "reboot": ("      --reboot", "[warned: nodes are not rebooted]"),
    "oversubscribe": ("  -s, --oversubscribe", "[warned: allocated CPUs are never shared\n"
                                               "between jobs]"),
    "core-spec": ("  -S, --core-spec=cores", "[warned: no specialized cores]"),
    "spread-job": ("      --spread-job", "[warned: nodes are chosen best-fit]"),
    "switches": ("      --switches=max-switches{@max-time-to-wait}",
                 "\nat most this many leaf switches (topology)"),
    "thread-spec": ("      --thread-spec=threads", "[warned: no specialized threads]"),
    "time": ("  -t, --time=minutes", "time limit (minutes, or [D-]HH:MM:SS and the like)"),
    "time-min": ("      --time-min=minutes", "the least time limit the job accepts: the\n"
                                             "scheduler may give any limit from it up"),
    "tres-per-task": ("      --tres-per-task=list", "[warned: use --gpus-per-task or\n"
                                                   "--cpus-per-task]"),
    "uid": ("      --uid=user_id", "run the job as this user (root only)"),
    "use-min-nodes": ("      --use-min-nodes", "a node range takes as few nodes as fit"),
    "verbose": ("  -v, --verbose", "[ignored: Muster's commands print no debug output]"),
    "wait-all-nodes": ("      --wait-all-nodes=0|1", "[ignored: nodes are up before a job\n"
                                                     "starts]"),
    "wckey": ("      --wckey=wckey", "workload key, stored and shown (not checked)"),
    # constraint options
    "cluster-constraint": ("      --cluster-constraint=[!]list", "[warned: no federation]"),
    "contiguous": ("      --contiguous", "use consecutive nodes (slurm.conf order)"),
    "constraint": ("  -C, --constraint=list", "node features the job needs (&, |, [a|b],\n"
                                              "feature*count, parentheses)"),
    "nodefile": ("  -F, --nodefile=filename", "run on the nodes named in this file"),
    "mem": ("      --mem=MB", "memory per node (suffix K, M, G or T)"),
    "mincpus": ("      --mincpus=n", "a node needs this many free CPUs, and the job\n"
                                      "gets them there"),
    "reservation": ("      --reservation=name", "run in this advance reservation"),
    "tmp": ("      --tmp=MB", "[warned: TmpDisk is not scheduled]"),
    "nodelist": ("  -w, --nodelist=hosts...", "run on (at least) these nodes"),
    "exclude": ("  -x, --exclude=hosts...", "never run on these nodes"),
    # consumable resources
    "mem-per-cpu": ("      --mem-per-cpu=MB", "memory per allocated CPU (suffix K, M, G or T);\n"
                                               "--mem and --mem-per-cpu exclude each other"),
    # affinity
    "sockets-per-node": ("      --sockets-per-node=S", "[warned: Muster allocates CPUs only]"),
    "cores-per-socket": ("      --cores-per-socket=C", "[warned: Muster allocates CPUs only]"),
    "threads-per-core": ("      --threads-per-core=T", "[warned: Muster allocates CPUs only]"),
    "extra-node-info": ("  -B  --extra-node-info=S[:C[:T]]",
                        " [warned: Muster allocates CPUs, not sockets,\n"
                        "cores or threads]"),
    "ntasks-per-core": ("      --ntasks-per-core=n", "[warned: Muster allocates CPUs only]"),
    "ntasks-per-socket": ("      --ntasks-per-socket=n", "[warned: Muster allocates CPUs only]"),
    # GPUs
    "cpus-per-gpu": ("      --cpus-per-gpu=n", "CPUs for each allocated GPU"),
    "gpus": ("  -G, --gpus=n", "GPUs for the whole job ([type:]count)"),
    "gpu-bind": ("      --gpu-bind=...", "which GPUs each task sees: closest, none,\n"
                                         "single:N, per_task:N, map_gpu:, mask_gpu:"),
    "gpu-freq": ("      --gpu-freq=...", "[warned: no GPU frequency control]"),
    "gpus-per-node": ("      --gpus-per-node=n", "GPUs on each allocated node"),
    "gpus-per-socket": ("      --gpus-per-socket=n", "[refused: GPUs are allocated per node\n"
                                                    "(use --gpus-per-node)]"),
    "gpus-per-task": ("      --gpus-per-task=n", "GPUs for each task"),
    "mem-per-gpu": ("      --mem-per-gpu=n", "memory for each allocated GPU"),
}

_AFFINITY_HEAD = (
    "\nAffinity/Multi-core options: (Muster allocates CPUs: it accepts these and warns)\n")
_GPU = ["cpus-per-gpu", "gpus", "gpu-bind", "gpu-freq", "gpus-per-node", "gpus-per-socket",
        "gpus-per-task", "mem-per-gpu"]
_TAIL_ROWS = [("Help options:", ""),
              ("  -h, --help", "show this text"),
              ("      --usage", "show the short list of options"),
              ("", ""),
              ("Other options:", ""),
              ("  -V, --version", "print the Slurm version Muster follows and exit")]


def _job_help(head: str, sections, extra: dict) -> str:
    """A job command's help: ``sections`` = [(title or None, [long name or (names, desc)])]."""
    parts = [head + "\n\n"]
    for title, keys in sections:
        if title is not None:
            parts.append(title)
        rows = []
        for key in keys:
            if isinstance(key, tuple):
                rows.append(key)
            else:
                rows.append(extra.get(key) or _JOB[key])
        parts.append(_rows(rows))
    parts.append("\n" + _rows(_TAIL_ROWS))
    return "".join(parts)


_CONTAINER = ["container", "container-image", "container-mounts", "container-workdir",
              "container-name", "container-writable", "container-readonly", "container-env",
              "container-mount-home", "no-container-mount-home", "container-remap-root",
              "no-container-remap-root", "container-save"]
_AFFINITY = ["sockets-per-node", "cores-per-socket", "threads-per-core", "extra-node-info",
             ("", ""), "ntasks-per-core", "ntasks-per-socket"]


def _sbatch_help() -> str:
    extra = {
        "chdir": ("  -D, --chdir=directory", "directory the batch script runs in"),
        "error": ("  -e, --error=err", "file the script's standard error goes to"),
        "input": ("  -i, --input=in", "file the script's standard input is read from"),
        "output": ("  -o, --output=out", "file the script's standard output goes to"),
    }
    run = [
        ("  -a, --array=indexes", "submit a job array with these task indexes\n"
                                  "(e.g. 0-15:2 or 1,3,5; %N caps the running tasks)"),
        "account", "acctg-freq", "bb", "bbf", "begin", "comment", "cpu-freq", "cpus-per-task",
        "dependency", "deadline", "delay-boot", "chdir", "error",
        ("      --export[=names]", "which variables of the environment the job gets\n"
                                   "(ALL, NONE, or names and NAME=value)"),
        ("      --export-file=file|fd", "add NAME=value lines (or NUL-separated ones)\n"
                                        "from a file or descriptor to the environment"),
        ("      --get-user-env", "[warned: the job gets the submission environment]"),
        "gid", "gres", "gres-flags", "hold", "hint",
        ("      --ignore-pbs", "[ignored: #PBS lines are comments to Muster]"),
        "input", "job-name", "no-kill",
        ("      --kill-on-invalid-dep=yes|no", "[warned: a job whose dependency can never be\n"
                                               "met stays pending]"),
        "licenses", "clusters", *_CONTAINER, "distribution", "mail-type", "mail-user",
        "mcs-label", "mem-bind", "mpi", "ntasks", "network", "nice",
        ("      --no-requeue", "never requeue the job"),
        "ntasks-per-gpu", "ntasks-per-node", "nodes", "open-mode", "output", "overcommit",
        "partition",
        ("      --parsable", "print only the job id (\";cluster\" after it when\n"
                             "one is named) once the job is submitted"),
        "power", "prefer", "priority", "profile", "propagate", "qos", "quiet", "reboot",
        ("      --requeue", "let the job be requeued (node failure, scontrol)"),
        "oversubscribe", "core-spec",
        ("      --signal=[[R][B]:]num[@time]", "send signal num this many seconds (default\n"
                                               "60) before the time limit"),
        "spread-job", "switches",
        ("      --test-only", "[refused: no will-run estimate: the job would be\n"
                              "submitted]"),
        "thread-spec", "time", "time-min", "tres-per-task", "uid", "use-min-nodes", "verbose",
        ("  -W, --wait", "return when the job has ended, with its exit code"),
        "wait-all-nodes", "wckey",
        ("      --wrap[=command string]", "submit the command as the body of a sh script"),
    ]
    constraint = ["cluster-constraint", "contiguous", "constraint", "nodefile", "mem",
                  "mincpus", "reservation", "tmp", "nodelist", "exclude"]
    consumable = [
        ("      --exclusive[=user]", "allocate whole nodes (=user and =topo: whole\n"
                                     "nodes too, with a warning)"),
        ("      --exclusive[=mcs]", "whole nodes, with a warning (no MCS plugin)"),
        "mem-per-cpu"]
    text = _job_help(
        "Usage: sbatch [OPTIONS(0)...] [ : [OPTIONS(N)...]] script(0) [args(0)...]",
        [("Parallel run options:\n", run), ("\nConstraint options:\n", constraint),
         ("\nConsumable resources related options:\n", consumable),
         (_AFFINITY_HEAD, _AFFINITY), ("\nGPU scheduling options:\n", _GPU)], extra)
    return text.replace("\n      --usage ", "\n  -u, --usage ")  # sbatch alone takes -u


_SRUN_OWN = {
    "bcast": ("      --bcast=<dest_path>", "[warned: the program is run from its path]"),
    "bcast-exclude": ("      --bcast-exclude=<paths>", "[warned: the program is run from its\n"
                                                      "path]"),
    "relative": ("  -r, --relative=n", "start the step's nodes at node n of the\n"
                                       "allocation (0: the first)"),
    "compress": ("      --compress[=library]", "[ignored: no --bcast to compress]"),
    "chdir": ("  -D, --chdir=path", "directory the tasks run in"),
    "export": ("      --export=env_vars|NONE", "which variables the tasks get (ALL, NONE,\n"
                                               "names and NAME=value)"),
    "error": ("  -e, --error=err", "file the tasks' standard error goes to (%t: task)"),
    "epilog": ("      --epilog=program", "[refused: not supported]"),
    "preserve-env": ("  -E, --preserve-env", "[warned: the step's counts come from the\n"
                                             "command line]"),
    "input": ("  -i, --input=in", "where the tasks' standard input comes from"),
    "jobid": ("      --jobid=id", "run the step in this existing allocation"),
    "kill-on-bad-exit": ("  -K, --kill-on-bad-exit", "end the step when a task exits with a\n"
                                                     "non-zero code"),
    "label": ("  -l, --label", "prefix each output line with its task number"),
    "multi-prog": ("      --multi-prog", "[refused: not supported]"),
    "output": ("  -o, --output=out", "file the tasks' standard output goes to (%t: task)"),
    "overlap": ("      --overlap", "let this step share CPUs with other steps"),
    "het-group": ("      --het-group=value", "[refused: no heterogeneous jobs]"),
    "prolog": ("      --prolog=program", "[refused: not supported]"),
    "pty": ("      --pty", "run task zero on a pseudo-terminal (the other\n"
                           "tasks' standard I/O is /dev/null)"),
    "quit-on-interrupt": ("      --quit-on-interrupt", "[warned: a second Ctrl-C within a\n"
                                                      "second kills the step]"),
    "send-libs": ("      --send-libs[=yes|no]", "[warned: the program is run from its path]"),
    "slurmd-debug": ("      --slurmd-debug=level", "[ignored: debug level of slurmd]"),
    "task-epilog": ("      --task-epilog=program", "[refused: not supported]"),
    "task-prolog": ("      --task-prolog=program", "[refused: not supported]"),
    "threads": ("  -T, --threads=threads", "[ignored: srun's own launch threads]"),
    "unbuffered": ("  -u, --unbuffered", "pass output on as it comes, not line by line"),
    "wait": ("  -W, --wait=sec", "kill the tasks still running sec seconds after\n"
                                 "the step's first task exits"),
    "disable-status": ("  -X, --disable-status", "[ignored: srun prints no status on Ctrl-C]"),
    "no-allocate": ("  -Z, --no-allocate", "[refused: not supported]"),
    "exact": ("      --exact", "the step gets exactly the CPUs it asks for (always\n"
                               "so in Muster)"),
    "resv-ports": ("      --resv-ports", "[warned: no reserved ports (MASTER_PORT is set)]"),
    "cpu-bind": ("      --cpu-bind=...", "bind tasks to CPUs with TaskPlugin=task/affinity\n"
                                         "(--cpu-bind=help lists the types)"),
    "accel-bind": ("      --accel-bind=...", "[warned: no accelerator binding]"),
    "external-launcher": ("      --external-launcher", "[warned: not supported]"),
    "interactive": ("      --interactive", "[warned: not supported]"),
}

_SRUN_RUN = [
    "account", "acctg-freq", "bb", "bbf", "bcast", "bcast-exclude", "begin", "cpus-per-task",
    "comment",
    "compress", *_CONTAINER, "cpu-freq", "dependency", "deadline", "delay-boot", "chdir",
    "export", "error", "epilog", "preserve-env", "external-launcher", "gid", "gres",
    "gres-flags",
    "hold", "hint", "input", "immediate", "interactive", "jobid", "job-name", "no-kill",
    "kill-on-bad-exit", "label", "licenses", "clusters", "distribution", "mail-type",
    "mail-user", "mcs-label", "mem-bind", "mpi", "multi-prog", "ntasks", "network", "nice",
    "ntasks-per-gpu", "ntasks-per-node", "nodes", "open-mode", "output", "overcommit", "overlap",
    "het-group", "partition", "power", "prefer", "priority", "prolog", "profile", "propagate",
    "pty", "quit-on-interrupt", "qos", "quiet", "reboot", "relative", "oversubscribe",
    "core-spec",
    "send-libs", ("      --signal=[R:]num[@time]", "send signal num this many seconds (default\n"
                                                   "60) before the time limit"),
    "slurmd-debug", "spread-job", "switches", "task-epilog", "task-prolog", "thread-spec",
    "threads", "time", "time-min", "tres-per-task", "uid", "unbuffered", "use-min-nodes",
    "verbose",
    "wait", "wait-all-nodes", "wckey", "disable-status",
]
_SRUN_CONSUMABLE = [
    "exact",
    ("      --exclusive[=user]", "for a new allocation: whole nodes; for a step:\n"
                                 "the same as --exact"),
    ("      --exclusive[=mcs]", "whole nodes, with a warning (no MCS plugin)"),
    "mem-per-cpu", "resv-ports"]


def _srun_help() -> str:
    constraint = ["cluster-constraint", "contiguous", "constraint", "nodefile", "mem",
                  "mincpus", "reservation", "tmp", "nodelist", "exclude", "no-allocate"]
    return _job_help(
        "Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]] [ : [OPTIONS(N)...]] "
        "executable(N) [args(N)...]",
        [("Parallel run options:\n", _SRUN_RUN), ("\nConstraint options:\n", constraint),
         ("\nConsumable resources related options:\n", _SRUN_CONSUMABLE),
         (_AFFINITY_HEAD, _AFFINITY + ["accel-bind", "cpu-bind"]),
         ("\nGPU scheduling options:\n", _GPU)], _SRUN_OWN)


def _salloc_help() -> str:
    extra = {"chdir": ("  -D, --chdir=path", "directory the command runs in"),
             "ntasks": ("  -n, --ntasks=N", "number of tasks the allocation holds")}
    run = ["account", "acctg-freq", "begin",
           ("      --bell", "ring the terminal bell at the grant (default: only\n"
                            "after a wait of more than ten seconds)"),
           "bb", "bbf", "cpus-per-task", "comment",
           *_CONTAINER, "cpu-freq", "delay-boot", "dependency", "deadline", "chdir",
           ("      --get-user-env[=timeout][S|L]", "the --uid user's login environment under\n"
                                                   "salloc's own (root only)"),
           "gid", "gres", "gres-flags", "hold", "hint", "immediate", "job-name", "no-kill",
           ("  -K, --kill-command[=signal]", "signal for the command when the allocation is\n"
                                             "revoked (default TERM; without -K: HUP)"),
           "licenses",
           "clusters", "distribution", "mail-type", "mail-user", "mcs-label", "mem-bind", "mpi",
           "ntasks", "network", "nice",
           ("      --no-bell", "never ring the terminal bell"),
           "ntasks-per-gpu", "ntasks-per-node", "nodes",
           "overcommit", "power", "prefer", "priority", "profile", "propagate", "partition",
           "qos", "quiet", "reboot", "oversubscribe",
           ("      --signal=[R:]num[@time]", "send signal num this many seconds (default\n"
                                             "60) before the time limit"),
           "spread-job", "switches", "core-spec", "thread-spec", "time", "time-min",
           "tres-per-task", "uid", "use-min-nodes", "verbose", "wait-all-nodes", "wckey"]
    constraint = ["cluster-constraint", "contiguous", "constraint", "nodefile", "mem",
                  "mincpus", "reservation", "tmp", "nodelist", "exclude"]
    consumable = [("      --exclusive[=user]", "allocate whole nodes"),
                  ("      --exclusive[=mcs]", "whole nodes, with a warning (no MCS plugin)"),
                  "mem-per-cpu"]
    srun_only = ["bcast", "bcast-exclude", "compress", "export", "error", "epilog",
                 "preserve-env",
                 "external-launcher", "input", "interactive", "jobid", "kill-on-bad-exit",
                 "label", "multi-prog", "open-mode", "output", "overlap", "het-group", "prolog",
                 "pty", "quit-on-interrupt", "send-libs", "slurmd-debug", "task-epilog",
                 "task-prolog", "threads", "unbuffered", "wait", "disable-status",
                 "no-allocate", "exact", "resv-ports", "accel-bind", "cpu-bind", "relative"]
    mark = {"epilog", "prolog", "task-epilog", "task-prolog", "multi-prog", "het-group",
            "no-allocate"}
    srun_names = [(_SRUN_OWN.get(k) or _JOB[k])[0] for k in srun_only]
    # salloc's -K is --kill-command: srun's --kill-on-bad-exit keeps only its long name
    srun_names = [n.replace("  -K, ", "      ") for n in srun_names]
    srun_rows = [(names, "[refused: not supported]" if k in mark else
                  "[sent with the allocation request]" if k in ("export", "error", "input", "output",
                                                      "open-mode") else
                  "[warned: an srun option]") for names, k in zip(srun_names, srun_only)]
    return _job_help(
        "Usage: salloc [OPTIONS(0)...] [ : [OPTIONS(N)]] [command(0) [args(0)...]]",
        [("Parallel run options:\n", run), ("\nConstraint options:\n", constraint),
         ("\nConsumable resources related options:\n", consumable),
         (_AFFINITY_HEAD, _AFFINITY), ("\nGPU scheduling options:\n", _GPU),
         ("\nsrun options salloc accepts (it reads srun's option table):\n", srun_rows)], extra)


# ---- short usage lines ---------------------------------------------------------------------

_SBATCH_USAGE = """\
Usage: sbatch [-N nnodes] [-n ntasks]
              [-c ncpus] [-p partition] [--hold] [--parsable] [-t minutes]
              [-D path] [--no-kill] [--overcommit]
              [--input file] [--output file] [--error file]
              [--time-min=minutes] [--licenses=names] [--clusters=cluster_names]
              [--chdir=directory] [--oversubscribe] [-m dist] [-J jobname]
              [--verbose] [--gid=group] [--uid=user]
              [--contiguous] [--mincpus=n] [--mem=MB] [--tmp=MB] [-C list]
              [--account=name] [--dependency=type:jobid[+time]] [--comment=name]
              [--mail-type=type] [--mail-user=user] [--nice[=value]] [--wait]
              [--requeue] [--no-requeue] [--ntasks-per-node=n] [--propagate]
              [--nodefile=file] [--nodelist=hosts] [--exclude=hosts]
              [--network=type] [--mem-per-cpu=MB] [--qos=qos] [--gres=list]
              [--mem-bind=...] [--reservation=name] [--mcs-label=mcs]
              [--cpu-freq=min[-max[:gov]]] [--power=flags] [--gres-flags=opts]
              [--switches=max-switches{@max-time-to-wait}] [--reboot]
              [--core-spec=cores] [--thread-spec=threads]
              [--bb=burst_buffer_spec] [--bbf=burst_buffer_file]
              [--array=index_values] [--profile=...] [--ignore-pbs] [--spread-job]
              [--export[=names]] [--export-file=file|fd] [--delay-boot=mins]
              [--use-min-nodes]
              [--cpus-per-gpu=n] [--gpus=n] [--gpu-bind=...]
              [--gpus-per-node=n] [--gpus-per-task=n]
              [--mem-per-gpu=MB]
              executable [args...]
"""

_SRUN_USAGE = """\
Usage: srun [-N nnodes] [-n ntasks] [-i in] [-o out] [-e err]
            [-c ncpus] [-p partition] [--hold] [-t minutes]
            [-D path] [--immediate[=secs]] [--overcommit] [--overlap] [--no-kill]
            [--oversubscribe] [--label] [--unbuffered] [-m dist] [-J jobname]
            [--jobid=id] [--verbose] [--slurmd_debug=#] [--gres=list]
            [-T threads] [-W sec] [--gres-flags=opts]
            [--licenses=names] [--clusters=cluster_names]
            [--qos=qos] [--time-min=minutes]
            [--contiguous] [--mincpus=n] [--mem=MB] [--tmp=MB] [-C list]
            [--mpi=type] [--account=name] [--dependency=type:jobid[+time]]
            [--kill-on-bad-exit] [--propagate[=rlimits] [--comment=name]
            [--cpu-bind=...] [--mem-bind=...] [--network=type]
            [--ntasks-per-node=n] [--ntasks-per-socket=n] [reservation=name]
            [--ntasks-per-core=n] [--mem-per-cpu=MB] [--preserve-env]
            [--profile=...] [--exact]
            [--mail-type=type] [--mail-user=user] [--nice[=value]]
            [--prolog=fname] [--epilog=fname]
            [--task-prolog=fname] [--task-epilog=fname]
            [--multi-prog] [--mcs-label=mcs]
            [--cpu-freq=min[-max[:gov]]] [--power=flags] [--spread-job]
            [--switches=max-switches{@max-time-to-wait}] [--reboot]
            [--core-spec=cores] [--thread-spec=threads]
            [--bb=burst_buffer_spec] [--bbf=burst_buffer_file]
            [--bcast=<dest_path>]
            [--send-libs[=y|n]] [--compress[=library]]
            [--acctg-freq=<datatype>=<interval>] [--delay-boot=mins]
            [-w hosts...] [-x hosts...] [--use-min-nodes]
            [--het-group=value]
            [--cpus-per-gpu=n] [--gpus=n] [--gpu-bind=...]
            [--gpus-per-node=n] [--gpus-per-task=n]
            [--mem-per-gpu=MB]
            executable [args...]
"""

_SALLOC_USAGE = """\
Usage: salloc [-N numnodes|[min nodes]-[max nodes]] [-n num-processors]
              [-c cpus-per-node] [-p partition] [--hold] [-t minutes]
              [--immediate[=secs]] [--no-kill] [--overcommit] [-D path]
              [--oversubscribe] [-J jobname]
              [--verbose] [--gid=group] [--uid=user] [--licenses=names]
              [--clusters=cluster_names]
              [--contiguous] [--mincpus=n] [--mem=MB] [--tmp=MB] [-C list]
              [--account=name] [--dependency=type:jobid[+time]] [--comment=name]
              [--mail-type=type] [--mail-user=user] [--nice[=value]]
              [--spread-job]
              [--nodefile=file] [--nodelist=hosts] [--exclude=hosts]
              [--network=type] [--mem-per-cpu=MB] [--qos=qos]
              [--mem-bind=...] [--reservation=name] [--mcs-label=mcs]
              [--time-min=minutes] [--gres=list] [--gres-flags=opts]
              [--cpu-freq=min[-max[:gov]]] [--power=flags] [--profile=...]
              [--switches=max-switches[@max-time-to-wait]]
              [--core-spec=cores] [--thread-spec=threads] [--reboot]
              [--bb=burst_buffer_spec] [--bbf=burst_buffer_file]
              [--delay-boot=mins] [--use-min-nodes]
              [--cpus-per-gpu=n] [--gpus=n] [--gpu-bind=...]
              [--gpus-per-node=n] [--gpus-per-task=n]
              [--mem-per-gpu=MB]
              [command [args...]]
"""


# ---- squeue, sinfo, scancel, sprio ---------------------------------------------------------

_SQUEUE_HELP = "Usage: squeue [OPTIONS]\n" + _rows([
    ("  -A, --account=account(s)", "only jobs charged to these accounts (comma list)"),
    ("  -a, --all", "also jobs in hidden partitions"),
    ("      --array-unique", "one line per pending array task (as -r)"),
    ("      --federation", "accepted: this cluster is its only member"),
    ("  -h, --noheader", "print no header line"),
    ("      --hide", "[ignored: jobs of every partition are shown, as\n"
                     "with -a]"),
    ("  -i, --iterate=seconds", "print the report again every so many seconds"),
    ("  -j, --jobs=job(s)", "only these jobs (comma list; also --job)"),
    ("      --json", "print the jobs as JSON (data_parser v0.0.40)"),
    ("      --local", "accepted: only this cluster is ever shown"),
    ("  -l, --long", "the long report (adds time limit and reason)"),
    ("  -L, --licenses=(license names)", "only jobs using these licenses (none here)"),
    ("  -M, --clusters=cluster_name", "cluster to ask: only this cluster's own name"),
    ("      --me", "only the jobs of the user running squeue"),
    ("  -n, --name=job_name(s)", "only jobs with these names (comma list)"),
    ("      --noconvert", "print sizes in megabytes (2048M stays 2048M)"),
    ("  -o, --format=format", "the columns, as %-fields (e.g. \"%.18i %.9P %j\")"),
    ("  -O, --Format=format", "the columns, as field names (e.g. jobid,name:20)"),
    ("  -p, --partition=partition(s)", "only jobs in these partitions (comma list)"),
    ("  -P, --priority", "one line per partition a pending job may run in"),
    ("  -q, --qos=qos(s)", "only jobs with these QOS (comma list)"),
    ("  -R, --reservation=name", "only jobs in this reservation"),
    ("  -r, --array", "one line per array task, pending ones too"),
    ("      --sibling", "accepted: no federation, so no sibling jobs"),
    ("  -s, --steps[=step(s)]", "list job steps instead of jobs (these steps, or all)"),
    ("  -S, --sort=fields", "sort on these fields (comma list, - for descending)"),
    ("      --start", "pending jobs with their expected start times"),
    ("  -t, --states=states", "only jobs in these states (comma list; default\n"
                              "pending and running; --states=all for every one)"),
    ("  -u, --user=user_name(s)", "only jobs of these users (comma list)"),
    ("  -v, --verbose", "[ignored: no debug output]"),
    ("  -V, --version", "print the Slurm version Muster follows and exit"),
    ("  -w, --nodelist=hostlist", "only jobs on these nodes (also --nodes)"),
    ("      --yaml", "print the jobs as YAML"),
    ("", ""), ("Help options:", ""),
    ("  --help", "show this text"),
    ("  --usage", "show the short list of squeue options"),
], 34)

_SQUEUE_USAGE = """\
Usage: squeue [-A account] [--clusters names] [-i seconds] [--job jobid]
              [-n name] [-o format] [-p partitions] [--qos qos]
              [--reservation reservation] [--sort fields] [--start]
              [--step step_id] [-t states] [-u user_name] [--usage]
              [-L licenses] [-w nodes] [--federation] [--local] [--sibling]
              [-ahjlrsv]
"""

_SINFO_HELP = "Usage: sinfo [OPTIONS]\n" + _rows([
    ("  -a, --all", "show every partition, hidden ones too"),
    ("  -d, --dead", "only nodes that do not respond"),
    ("  -e, --exact", "group nodes only when their configuration is equal"),
    ("      --federation", "accepted: this cluster is its only member"),
    ("  -h, --noheader", "print no header line"),
    ("  --hide", "hide hidden partitions (the default; undoes -a)"),
    ("  -i, --iterate=seconds", "print the report again every so many seconds"),
    ("      --json", "print the nodes as JSON (data_parser v0.0.40)"),
    ("      --local", "accepted: only this cluster is ever shown"),
    ("  -l, --long", "the long report (more columns)"),
    ("  -M, --clusters=names", "cluster to ask: only this cluster's own name"),
    ("  -n, --nodes=NODES", "only these nodes"),
    ("  --noconvert", "[ignored: sinfo prints memory in megabytes]"),
    ("  -N, --Node", "one line per node"),
    ("  -o, --format=format", "the columns, as %-fields"),
    ("  -O, --Format=format", "the columns, as field names"),
    ("  -p, --partition=PARTITION", "only these partitions"),
    ("  -r, --responding", "only nodes that respond"),
    ("  -R, --list-reasons", "why nodes are down, drained or failing"),
    ("  -s, --summarize", "node counts per state only (A/I/O/T)"),
    ("  -S, --sort=fields", "sort on these fields (comma list)"),
    ("  -t, --states=node_state", "only nodes in these states (also --state)"),
    ("  -T, --reservation", "list the advance reservations instead"),
    ("  -v, --verbose", "[ignored: no debug output]"),
    ("  -V, --version", "print the Slurm version Muster follows and exit"),
    ("      --yaml", "print the nodes as YAML"),
    ("", ""), ("Help options:", ""),
    ("  --help", "show this text"),
    ("  --usage", "show the short list of sinfo options"),
], 29)

_SINFO_USAGE = """\
Usage: sinfo [-abdelNRrsTv] [-i seconds] [-t states] [-p partition] [-n nodes]
             [-S fields] [-o format] [-O Format] [--federation] [--local]
"""

_SCANCEL_HELP = "Usage: scancel [OPTIONS] [job_id[_array_id][.step_id]]\n" + _rows([
    ("  -A, --account=account", "only jobs charged to this account"),
    ("  -b, --batch", "signal only the batch shell of the job"),
    ("  -f, --full", "signal the batch shell and every step of the job"),
    ("  -H, --hurry", "[ignored: no burst buffers to stage out]"),
    ("  -i, --interactive", "ask for confirmation before each job"),
    ("  -M, --clusters", "cluster to act on: only this cluster's own name"),
    ("      --me", "only the jobs of the user running scancel"),
    ("  -n, --name=job_name", "only jobs with this name (also --jobname)"),
    ("  -p, --partition=partition", "only jobs in this partition"),
    ("  -Q, --quiet", "print no warnings"),
    ("  -q, --qos=qos", "only jobs with this QOS"),
    ("  -R, --reservation=reservation", "only jobs in this reservation"),
    ("      --sibling=cluster_name", "refused for every job: Muster has no federation\n"
                                     "(Not a valid federated job)"),
    ("  -s, --signal=name | integer", "send this signal rather than ending the job"),
    ("  -t, --state=states", "only jobs in these states: PENDING, RUNNING,\n"
                             "SUSPENDED"),
    ("  -u, --user=user_name", "only jobs of this user"),
    ("  -V, --version", "print the Slurm version Muster follows and exit"),
    ("  -v, --verbose", "[ignored: no debug output]"),
    ("  -w, --nodelist", "only jobs running on these nodes"),
    ("      --wckey=wckey", "only jobs with this workload key"),
    ("", ""), ("Help options:", ""),
    ("  -h, --help", "show this text"),
    ("  --usage", "show the short list of scancel options"),
], 34)

_SCANCEL_USAGE = """\
Usage: scancel [-A account] [--batch] [--full] [--interactive] [-n job_name]
               [-p partition] [-Q] [-q qos] [-R reservation] [-s signal | integer]
               [-t PENDING | RUNNING | SUSPENDED] [--usage] [-u user_name]
               [--hurry] [-V] [-v] [-w hosts...] [--wckey=wckey]
               [job_id[_array_id][.step_id]]
"""

_SPRIO_HELP = "Usage: sprio [OPTIONS]\n" + _rows([
    ("      --federation", "accepted: this cluster is in no federation, its\n"
                           "jobs are all there is"),
    ("  -h, --noheader", "print no header line"),
    ("  -j, --jobs", "only these jobs (comma list; default: every\n"
                     "pending job)"),
    ("      --local", "accepted: every job is this cluster's"),
    ("  -l, --long", "the long report (every factor, raw)"),
    ("  -M, --cluster=cluster_name", "cluster to ask: only this cluster's own name"),
    ("  -n, --norm", "print the factors normalized (0 to 1)"),
    ("  -o, --format=format", "the columns, as %-fields"),
    ("      --sibling", "add the CLUSTER column (%c); a job has one\n"
                        "record, this cluster's"),
    ("  -p, --partition=partition_name", "only jobs in these partitions (comma list)"),
    ("  -S, --sort=fields", "sort on these fields (comma list)"),
    ("  -u, --user=user_name", "only jobs of these users (comma list)"),
    ("  -v, --verbose", "[ignored: no debug output]"),
    ("  -V, --version", "print the Slurm version Muster follows and exit"),
    ("  -w, --weights", "print the weight of each priority factor"),
    ("", ""), ("Help options:", ""),
    ("  --help", "show this text"),
    ("  --usage", "show the short list of sprio options"),
], 34)

_SPRIO_USAGE = """\
Usage: sprio [-j jid[s]] [-u user_name[s]] [-o format] [-p partitions]
   [--federation] [--local] [--sibling] [--usage] [-hlnvVw]
"""

_SDIAG_HELP = "Usage: sdiag [OPTIONS]\n" + _rows([
    ("  -a, --all", "every section (they are always all printed)"),
    ("  -r, --reset", "zero the counters (root and SlurmUser)"),
    ("  -M, --cluster", "cluster to ask: only this cluster's own name"),
    ("  -i, --sort-by-id", "order the RPC tables by message id"),
    ("  -t, --sort-by-time", "order the RPC tables by total time"),
    ("  -T, --sort-by-time2", "order the RPC tables by average time"),
    ("  -V, --version", "print the Slurm version Muster follows and exit"),
    ("", ""), ("Help options:", ""),
    ("  --help", "show this text"),
    ("  --usage", "show the short list of sdiag options"),
], 22)

_SDIAG_USAGE = "Usage: sdiag [-M cluster] [-aritT]\n"

# ---- sshare, sstat, sacct (the accounting tools' layout) -----------------------------------

_SSHARE_HELP = "Usage:  sshare [OPTION]\n  Valid OPTIONs are:\n" + _rows([
    ("    -a or --all", "every user of every account"),
    ("    -A or --accounts=", "only these accounts (comma list)"),
    ("    -e or --helpformat", "list the fields --format accepts"),
    ("    -h or --help", "show this text"),
    ("    -l or --long", "add the normalized usage and level fair-share"),
    ("    -m or --partition", "[ignored: associations have no partitions]"),
    ("    -M or --cluster=names", "cluster to ask: only this cluster's own name"),
    ("    -n or --noheader", "print no header lines"),
    ("    -o or --format=", "the columns (comma list of field names)"),
    ("    -p or --parsable", "'|' between fields and at the end of the line"),
    ("    -P or --parsable2", "'|' between fields only"),
    ("    -u or --users=", "only these users (comma list)"),
    ("    -U or --Users", "user lines only"),
    ("    -v or --verbose", "[ignored: no debug output]"),
    ("    -V or --version", "print the Slurm version Muster follows"),
    ("          --json", "print the shares as JSON"),
    ("          --yaml", "print the shares as YAML"),
    ("          --help", "show this text"),
    ("          --usage", "show this text"),
], 27)


def _acct_rows(rows) -> str:
    """sacct/sstat's layout: the names on a line of their own, the description under them."""
    out = []
    for names, desc in rows:
        out.append(f"     {names}:")
        out.extend(" " * 19 + line for line in desc.split("\n"))
    return "\n".join(out) + "\n"


_SSTAT_HELP = "sstat [<OPTION>] -j <job(.stepid)>\n    Valid <OPTION> values are:\n" + _acct_rows([
    ("-a, --allsteps", "every running step of the job when no step is named"),
    ("-e, --helpformat", "list the fields --format accepts"),
    ("-h, --help", "show this text"),
    ("-i, --pidformat", "JobID, Nodelist and Pids, a line per node of each\n"
                        "step (no process ids: the usage samples carry none)"),
    ("-j, --jobs", "job(.step) or comma list of them (required). Without a\n"
                   "step: the job's first running step, or all with -a;\n"
                   "'batch' and 'extern' name those steps"),
    ("-n, --noheader", "print no header lines"),
    ("--noconvert", "print sizes in their own unit (2048M stays 2048M)"),
    ("-o, --format", "the columns (comma list; also --fields)"),
    ("-p, --parsable", "'|' between fields and at the end of the line"),
    ("-P, --parsable2", "'|' between fields only"),
    ("--usage", "show the short usage line"),
    ("-v, --verbose", "[ignored: no debug output]"),
    ("-V, --version", "print the Slurm version Muster follows"),
])

_SSTAT_USAGE = "Usage: sstat [options] -j <job(.stepid)>\n\tUse --help for help\n"

_SACCT_HELP = "sacct [<OPTION>]\n     Valid <OPTION> values are:\n" + _acct_rows([
    ("-a, --allusers", "jobs of every user (root's default); otherwise only\n"
                       "your own (also --all-users)"),
    ("-A, --accounts", "only jobs charged to these accounts (comma list)"),
    ("    --array", "one line per array task, pending ones too"),
    ("-b, --brief", "the same as --format=jobid,state,exitcode"),
    ("-B, --batch-script", "the batch script of each job -j names (owner and\n"
                           "operators only; NONE for srun/salloc jobs)"),
    ("-c, --completion", "[refused: no job completion data (Slurm job\n"
                         "completion is disabled)]"),
    ("    --delimiter", "what -p/-P put between fields (default '|')"),
    ("-D, --duplicates", "every record of a job id that was used again (a\n"
                         "requeued job's earlier runs), not only the latest"),
    ("-e, --helpformat", "list the fields --format accepts"),
    ("-E, --endtime", "only jobs that were eligible before this time (also\n"
                      "--end)"),
    ("    --env-vars", "the submission environment of each job -j names\n"
                       "(owner and operators only; NONE for srun/salloc jobs)"),
    ("    --federation", "accepted: this cluster is its only member"),
    ("-f, --file=file", "[refused: no job completion data]"),
    ("-g, --gid, --group", "only jobs of these groups (comma list of gids or\n"
                           "group names)"),
    ("-h, --help", "show this text"),
    ("-i, --nnodes=N", "only jobs that ran on N nodes (N = min[-max])"),
    ("-I, --ncpus=N", "only jobs that ran on N CPUs (N = min[-max])"),
    ("-j, --jobs", "job(.step) or comma list of them; default all jobs\n"
                   "(also --job)"),
    ("--json", "print the jobs as JSON (data_parser v0.0.40)"),
    ("-k, --timelimit-min", "only jobs with this time limit; with -K the least\n"
                            "of the range"),
    ("-K, --timelimit-max", "the largest time limit of the -k range (alone:\n"
                            "ignored)"),
    ("    --local", "accepted: only this cluster's jobs are shown"),
    ("-l, --long", "the long list of fields"),
    ("-L, --allclusters", "accepted: this cluster is the only one"),
    ("-M, --clusters", "cluster to ask: only this cluster's own name"),
    ("-n, --noheader", "print no header lines"),
    ("--noconvert", "print sizes in their own unit (2048M stays 2048M)"),
    ("-N, --nodelist", "only jobs that ran on any of these nodes"),
    ("--name", "only jobs with any of these names"),
    ("-o, --format", "the columns (comma list of fields, name%width)"),
    ("-p, --parsable", "'|' between fields and at the end of the line"),
    ("-P, --parsable2", "'|' between fields only"),
    ("-q, --qos", "only jobs with these QOS"),
    ("-r, --partition", "only jobs in these partitions (comma list)"),
    ("-s, --state", "only jobs in these states during the time window\n"
                    "(r, cd, f, to, ca, pd, nf, oom, dl, ... or full names)"),
    ("-S, --starttime", "only jobs eligible after this time (default: 00:00\n"
                        "today, or now with -s) (also --start)"),
    ("-T, --truncate", "cut start and end times to the --starttime/--endtime\n"
                       "window"),
    ("-u, --user", "only jobs of these users or uids (also --uid)"),
    ("--units=[KMGTP]", "print sizes in this unit"),
    ("--usage", "show the short usage line"),
    ("-v, --verbose", "[ignored: no debug output]"),
    ("-V, --version", "print the Slurm version Muster follows"),
    ("-W, --wckeys", "only jobs with these workload keys (comma list)"),
    ("--whole-hetjob[=yes|no]", "[ignored: no heterogeneous jobs]"),
    ("-x, --associations", "only jobs of these association ids"),
    ("-X, --allocations", "the jobs only, not their steps"),
    ("--yaml", "print the jobs as YAML"),
]) + """\

     Times may be given as:
                   HH:MM[:SS] [AM|PM]
                   MMDD[YY] or MM/DD[/YY] or MM.DD[.YY]
                   MM/DD[/YY]-HH:MM[:SS]
                   YYYY-MM-DD[THH:MM[:SS]]
                   now[{+|-}count[seconds(default)|minutes|hours|days|weeks]]
"""

_SACCT_USAGE = "Usage: sacct [options]\n\tUse --help for help\n"

# ---- scontrol, sacctmgr: options, then the commands Muster has -----------------------------

_SCONTROL_HELP = "scontrol [<OPTION>] [<COMMAND>]\n    Valid <OPTION> values are:\n" + _rows([
    ("     -a, --all", "the same as the \"all\" command"),
    ("     -d, --details", "the same as the \"details\" command"),
    ("     --federation", "accepted: this cluster is in no federation"),
    ("     -F, --future", "include nodes in state FUTURE"),
    ("     -h, --help", "the same as the \"help\" command"),
    ("     --hide", "the same as the \"hide\" command"),
    ("     --json", "print show job/node/partition as JSON"),
    ("     --local", "accepted: every job is this cluster's"),
    ("     -M, --clusters", "cluster to act on: only this cluster's own name"),
    ("     -o, --oneliner", "the same as the \"oneliner\" command"),
    ("     -Q, --quiet", "the same as the \"quiet\" command"),
    ("     --sibling", "accepted: no job has siblings in other clusters"),
    ("     -u, --uid", "with hold/release/update: only the jobs of this user"),
    ("     --usage", "the same as the \"help\" command"),
    ("     -v, --verbose", "[ignored: no debug output]"),
    ("     -V, --version", "the same as the \"version\" command"),
    ("     --yaml", "print show job/node/partition as YAML"),
], 20) + "\n    Valid <COMMAND> values are:\n" + _rows([
    ("     create <SPECIFICATIONS>", "create a reservation"),
    ("     delete <SPECIFICATIONS>", "delete a reservation"),
    ("     help", "show this text"),
    ("     hold <job_list>", "keep these jobs from starting (ids or a name)"),
    ("     ping", "tell whether the controller answers"),
    ("     release <job_list>", "let held jobs start again"),
    ("     requeue <job_id>", "put a job back in the queue"),
    ("     requeuehold <job_id>", "requeue a job and hold it"),
    ("     setdebug <LEVEL>", "set the controller's log level (quiet, fatal,\n"
                              "error, info, verbose, debug, debug2..debug5 or 0-9)"),
    ("     setdebugflags [+|-]<FLAG>", "turn debug logging of subsystems on (+) or off\n"
                                       "(-): Agent, Backfill, Priority, Protocol,\n"
                                       "Reservation, Steps, TraceJobs"),
    ("     show <ENTITY> [<ID>]", "print the entity's records (all without an ID)"),
    ("     token [lifespan=] [username=]", "print an authentication token (SLURM_JWT=)"),
    ("     top <job_list>", "[ignored: accepted, the order is unchanged]"),
    ("     uhold <job_list>", "hold jobs as their user (see hold)"),
    ("     update <SPECIFICATIONS>", "change a job, node or reservation"),
    ("     version", "print the Slurm version Muster follows"),
], 30) + """\

  <ENTITY> may be "config", "federation" (nothing: no federation), "hostlist",
       "hostlistsorted", "hostnames", "job", "node", "partition", "reservation",
       "step" or "topology".

  <ID> may be a job id, job step id, node name, partition name, reservation
       name, switch or block name, or host list.

  Node names may be given as ranges: "node[1-4]" stands for node1 ... node4.
  A step id is the job id, a period and the step number.

  <SPECIFICATIONS> are Key=Value pairs as "show" prints them.
"""

_SACCTMGR_HELP = "sacctmgr [<OPTION>] [<COMMAND>]\n    Valid <OPTION> values are:\n" + "".join(
    f"     {names}: {desc}\n" for names, desc in [
        ("-h or --help", "the same as the \"help\" command"),
        ("-i or --immediate", "commit changes without asking"),
        ("-n or --noheader", "print no header lines"),
        ("-o or --oneliner", "accepted: every record is one line already"),
        ("-p or --parsable", "'|' between fields and at the end of the line"),
        ("-P or --parsable2", "'|' between fields only"),
        ("-Q or --quiet", "print nothing but errors"),
        ("-r or --readonly", "refuse any change"),
        ("-s or --associations", "with show: the associations of the entity"),
        ("-v or --verbose", "[ignored: no debug output]"),
        ("-V or --version", "print the Slurm version Muster follows"),
        ("--json", "print show output as JSON"),
        ("--yaml", "print show output as YAML"),
        ("--usage", "show this text"),
    ]) + "\n  Valid <COMMAND> values are:\n" + _rows([
        ("     add <ENTITY> <SPECS>", "add an entity (also: create)"),
        ("     delete <ENTITY> <SPECS>", "delete entities (also: remove)"),
        ("     help", "show this text"),
        ("     list <ENTITY> [<SPECS>]", "print the entities (also: show)"),
        ("     modify <ENTITY> <SPECS>", "change entities (also: update)"),
    ], 30) + """\

  <ENTITY> may be "account", "association", "cluster", "qos" or "user".

  <SPECS> are Key=Value pairs: "where" ones select the entities, "set" ones
       give the new values (Fairshare=, DefaultAccount=, Parent=, GrpTRES=,
       MaxJobs=, MaxSubmitJobs=, MaxWall=, Priority=, QOS=, ...), and
       format= picks the columns of list.
"""

_SEFF_USAGE = ("Usage: seff [Options] <Jobid>\n       Options:\n       -h    Help menu\n"
               "       -v    Version\n       -d    Debug mode: display raw Slurm data\n")


def help_text(prog: str) -> str:
    """The ``--help`` text of ``prog``."""
    fixed = {"squeue": _SQUEUE_HELP, "sinfo": _SINFO_HELP, "scancel": _SCANCEL_HELP,
             "sprio": _SPRIO_HELP, "sshare": _SSHARE_HELP, "sstat": _SSTAT_HELP,
             "sacct": _SACCT_HELP, "scontrol": _SCONTROL_HELP, "sacctmgr": _SACCTMGR_HELP,
             "seff": _SEFF_USAGE, "sdiag": _SDIAG_HELP}
    if prog in fixed:
        return fixed[prog]
    return {"sbatch": _sbatch_help, "srun": _srun_help, "salloc": _salloc_help}[prog]()


def usage_text(prog: str) -> str:
    """The ``--usage`` text of ``prog`` (scontrol, sacctmgr and sshare print their help)."""
    short = {"sbatch": _SBATCH_USAGE, "srun": _SRUN_USAGE, "salloc": _SALLOC_USAGE,
             "squeue": _SQUEUE_USAGE, "sinfo": _SINFO_USAGE, "scancel": _SCANCEL_USAGE,
             "sprio": _SPRIO_USAGE, "sstat": _SSTAT_USAGE, "sacct": _SACCT_USAGE,
             "sdiag": _SDIAG_USAGE}
    return short.get(prog) or help_text(prog)


def answer(prog: str, kind: str) -> tuple[str, int]:
    """(stdout text, exit status) for ``kind`` = help, usage or version. Every Slurm command
    exits 0 here; seff (a contrib script) prints its usage or version and exits 1."""
    if kind == "version":
        text = "seff Version 2.1\n" if prog == "seff" else version_line() + "\n"
    elif kind == "usage":
        text = usage_text(prog)
    else:
        text = help_text(prog)
    return text, 1 if prog == "seff" else 0
