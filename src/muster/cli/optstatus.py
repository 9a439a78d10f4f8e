"""What Muster does with every sbatch/srun/salloc option: the one source of docs/options.md and
of the warnings the commands print.

Standard library only, and imported only when an option needs a warning or the table is
rendered (muster.cli.optdocs: ``python -m muster.cli.optdocs > docs/options.md``; the renderer
reads the parsers, which import this module, so it lives apart).

Status of an option, per command:

* ``honoured`` — it has its Slurm meaning;
* ``warned`` — accepted, but Muster cannot honour it: the command prints
  ``<prog>: warning: --<option> is not supported by Muster: <why>; ignored`` and goes on;
* ``refused`` — honouring it is impossible and ignoring it would give a different job: the
  command or the controller refuses the request (Slurm's wording where Slurm has one);
* ``ignored`` — accepted silently because it cannot change the job's outcome here (the
  reason says why).

``tests/unit/test_optstatus.py`` fails when a parser gains an option without a status, when a
status names an option no parser has, and when docs/options.md is not what :func:`render`
writes.
"""

from __future__ import annotations

__all__ = ["COMMANDS", "STATUS", "check", "lookup", "warnings_for"]

COMMANDS = ("sbatch", "srun", "salloc")
H, W, R, I = "honoured", "warned", "refused", "ignored"  # noqa: E741

_SOCKETS = "Muster allocates CPUs, not sockets, cores or threads"
_JOB_ONLY = "a job option: applies when srun creates the allocation"

# long option name -> (status, note) for every command, or {command: (status, note)}
STATUS: dict[str, object] = {
    # ---- job shape and placement -------------------------------------------------------------
    "nodes": (H, "a range min-max gets as many nodes as are free at start, up to max (one task "
                 "each without -n); backfill plans it with min and grows it only onto nodes no "
                 "reservation needs; a --contiguous range takes min"),
    "ntasks": (H, ""), "ntasks-per-node": (H, ""),
    "cpus-per-task": (H, ""), "cpus-per-gpu": (H, "CPUs per node = max(tasks × cpus-per-task, "
                                                   "GPUs × cpus-per-gpu); DefCpuPerGPU applies "
                                                   "when neither is given"),
    "mem": (H, ""), "mem-per-cpu": (H, ""),
    "mem-per-gpu": (H, "memory per node = GPUs on it × the value (DefMemPerGPU when not given); "
                       "refused without GPUs"),
    "gres": (H, "gpu only"), "gpus": (H, ""), "gpus-per-node": (H, ""), "gpus-per-task": (H, ""),
    "constraint": (H, "&, |, [a|b] (one alternative for all nodes), counts a*N, parentheses; "
                      "an unknown feature is refused: Invalid feature specification"),
    "nodelist": (H, ""), "exclude": (H, ""),
    "mincpus": (H, "a node needs that many free CPUs and the job gets them there "
                   "(MinCPUsNode)"),
    "contiguous": (H, "consecutive nodes in slurm.conf order: the fewest that hold the job, "
                      "then best fit"),
    "wckey": (H, "stored and shown (scontrol WCKey=, squeue %w, sacct WCKey); no WCKey "
                 "associations are checked"),
    "nodefile": (H, "the file's node names, as --nodelist"),
    "exclusive": (H, "=user, =mcs and =topo get whole nodes too (stricter): warned"),
    "partition": (H, ""), "account": (H, ""), "qos": (H, ""), "reservation": (H, ""),
    "time": (H, ""), "time-min": (H, ""),
    "deadline": (H, "a pending job that can no longer end by then (its --time-min, else its "
                    "time limit) ends in state DEADLINE; one that starts gets its limit cut to "
                    "the deadline"),
    "begin": (H, ""), "dependency": (H, ""), "hold": (H, ""),
    "nice": (H, "lowers the priority (negative: operators only, raises it) under "
                "priority/basic and priority/multifactor"),
    "priority": (H, "operators only"),
    # --gpu-bind: checked by the commands, exported as SLURM_GPU_BIND by sbatch/salloc, sent by
    # srun, mapped per task by muster.core.steplayout (controller/steps.py hands it over)
    "gpu-bind": (H, "closest/none, single:N, per_task:N, map_gpu, mask_gpu: each task's "
                    "CUDA_VISIBLE_DEVICES"),
    "distribution": {"sbatch": (H, "block/cyclic, exported as SLURM_DISTRIBUTION for steps"),
                     "srun": (H, "block and cyclic task ids; plane/arbitrary lay tasks out "
                                 "as block"),
                     "salloc": (H, "exported as SLURM_DISTRIBUTION for steps")},
    "clusters": (H, "only this cluster: another name is refused"),
    "licenses": (R, "Muster has no licenses: Invalid license specification"),
    # ---- identity, I/O, notification -------------------------------------------------------
    "job-name": (H, ""), "output": (H, ""), "error": (H, ""), "input": (H, ""), "chdir": (H, ""),
    "comment": (H, ""), "export": (H, ""), "uid": (H, "root only"), "gid": (H, "root only"),
    "mail-type": (H, "through MailProg, Slurm's subjects; STAGE_OUT never fires (no burst "
                     "buffers)"),
    "mail-user": (H, "address or user name; MailDomain appended to a bare name"),
    "signal": (H, ""), "open-mode": (H, ""), "requeue": (H, ""), "no-requeue": (H, ""),
    "array": (H, ""), "wrap": (H, ""), "parsable": (H, ""), "wait": {
        "sbatch": (H, ""), "srun": (H, "N seconds after the first task exits the others are "
                                       "killed, with Slurm's lines (exit 137); also "
                                       "SLURM_WAIT"),
        "salloc": (W, "srun option: salloc waits for its command")},
    "export-file": (H, "NAME=value lines (or NUL-separated) added to the environment"),
    "help": (H, ""), "usage": (H, ""), "version": (H, ""), "quiet": (H, ""),
    "verbose": {"srun": (H, "Slurm's launch lines on stderr (jobid/nodes, launching StepId, "
                            "tasks started, task exit notifications); -vv adds the propagated "
                            "limits"),
                "sbatch": (I, "Muster's commands print no debug output"),
                "salloc": (I, "Muster's commands print no debug output")},
    "test-only": (R, "no will-run estimate: the job would be submitted"),
    # ---- options Muster cannot honour --------------------------------------------------------
    "extra-node-info": (W, _SOCKETS), "sockets-per-node": (W, _SOCKETS),
    "cores-per-socket": (W, _SOCKETS), "threads-per-core": (W, _SOCKETS),
    "ntasks-per-core": (W, _SOCKETS), "ntasks-per-socket": (W, _SOCKETS),
    "hint": (W, _SOCKETS), "core-spec": (W, "no specialized cores"),
    "thread-spec": (W, "no specialized threads"),
    "ntasks-per-gpu": (W, "tasks are not derived from GPUs"),
    "gres-flags": (W, "no CPU-GPU affinity"), "mem-bind": (W, "no NUMA memory binding"),
    "tmp": (H, "a node serves the job only with TmpDisk (slurm.conf, default 0) at least "
               "that large; more than every node has is refused"),
    "spread-job": (W, "nodes are chosen best-fit"),
    "use-min-nodes": (H, "a node range takes as few nodes as fit instead of as many as are "
                         "free"),
    "switches": (H, "with TopologyPlugin=topology/tree|block: at most N leaf switches (blocks), "
                    "waited for up to the time given (default max_switch_wait, 300 s); "
                    "without one it changes nothing"),
    "prefer": (W, "no soft constraints (use --constraint)"),
    "overcommit": (H, "the job gets one task's CPUs per node (cpus-per-task) and "
                      "SLURM_OVERCOMMIT=1, which its steps follow; a step's tasks may "
                      "outnumber its CPUs"),
    "oversubscribe": (W, "allocated CPUs are never shared between jobs"),
    "no-kill": (W, "a node failure ends the job (NODE_FAIL)"),
    "kill-on-invalid-dep": (W, "a job whose dependency can never be met stays pending "
                               "(DependencyNeverSatisfied)"),
    "get-user-env": {"sbatch": (W, "the job gets the submission environment"),
                     "salloc": (H, "root only, as with Slurm (others: SlurmdUser must be root "
                                   "to use --get-user-env); the --uid user's login environment "
                                   "(su - user -c env), under salloc's own variables, is the "
                                   "command's")},
    "gpu-freq": (W, "no GPU frequency control"),
    "gpus-per-socket": (R, "Muster allocates GPUs per node, not per socket (use "
                           "--gpus-per-node)"),
    "propagate": {"srun": (H, "srun's soft limits, set by each task's shell as the user "
                              "(never above the node's hard limits); without it slurm.conf's "
                              "PropagateResourceLimits(Except)"),
                  "sbatch": (W, "resource limits are not propagated"),
                  "salloc": (W, "resource limits are not propagated")},
    "immediate": (H, "bare: the controller starts the allocation at once or ends it FAILED; "
                     "=N: given up (cancelled) after N seconds pending; salloc also reads "
                     "SALLOC_IMMEDIATE (srun no SLURM_IMMEDIATE, as Slurm 22.05)"),
    "network": (W, "no network plugins"), "power": (W, "no power management"),
    "profile": (W, "no profiling plugin"), "reboot": (W, "nodes are not rebooted"),
    "mcs-label": (W, "no MCS plugin"), "cpu-freq": (W, "no CPU frequency control"),
    "cluster-constraint": (W, "no federation"),
    "tres-per-task": (W, "use --gpus-per-task / --cpus-per-task"),
    "mpi": (W, "no PMI server: start MPI programs with their own launcher"),
    "bb": (R, "no burst buffers"), "bbf": (R, "no burst buffers"),
    "container": (H, "the tasks (a batch script) run in the OCI bundle through oci.conf's "
                     "runtime, rootless as the user (docs/design.md Containers)"),
    "container-image": (H, "pyxis-style: an OCI layout, a tarball or docker://ref, unpacked "
                           "once per node into the user's cache"),
    "container-mounts": (H, ""), "container-workdir": (H, ""), "container-name": (H, ""),
    "container-writable": (H, ""), "container-readonly": (H, ""), "container-env": (H, ""),
    "container-mount-home": (H, ""), "no-container-mount-home": (H, ""),
    "container-remap-root": (H, "the user shows as root inside (the user on the host)"),
    "no-container-remap-root": (H, "the default: the user's own ids inside (needs "
                                   "/etc/subuid and /etc/subgid entries)"),
    "container-save": (H, "pyxis: the container's root filesystem saved as a squashfs image "
                          "(mksquashfs) when the task ends, by each node's first task"),
    "acctg-freq": (I, "no accounting sampling"), "delay-boot": (I, "nodes are never booted"),
    "wait-all-nodes": (I, "nodes are up before a job starts"),
    "ignore-pbs": (I, "#PBS lines are comments to Muster"),
    # ---- srun's own ---------------------------------------------------------------------------
    "label": {"srun": (H, ""), "salloc": (W, "srun option")},
    "kill-on-bad-exit": {"srun": (H, ""), "salloc": (W, "srun option")},
    "unbuffered": {"srun": (H, ""), "salloc": (W, "srun option")},
    "overlap": {"srun": (H, ""), "salloc": (W, "srun option")},
    "exact": {"srun": (H, "steps always get exactly the CPUs they ask for"),
              "salloc": (W, "srun option")},
    "jobid": {"srun": (H, ""), "salloc": (W, "srun option")},
    "pty": {"srun": (H, "task 0 on a pseudo-terminal; the other tasks' stdio is /dev/null"),
            "salloc": (W, "srun option")},
    "multi-prog": {"srun": (H, "task ranges, *, %t/%o, comments, continuation lines; read "
                               "by srun"),
                   "salloc": (R, "not supported")},
    "het-group": {"srun": (R, "no heterogeneous jobs"), "salloc": (R, "no heterogeneous jobs")},
    "no-allocate": {"srun": (R, "not supported"), "salloc": (R, "not supported")},
    "task-prolog": {"srun": (H, "run as the user before each task, after slurm.conf's "
                                "TaskProlog; export/unset/print lines as TaskProlog"),
                    "salloc": (R, "not supported")},
    "task-epilog": {"srun": (H, "run as the user after each task, before slurm.conf's "
                                "TaskEpilog"),
                    "salloc": (R, "not supported")},
    "prolog": {"srun": (R, "not supported"), "salloc": (R, "not supported")},
    "epilog": {"srun": (R, "not supported"), "salloc": (R, "not supported")},
    "disable-status": {"srun": (I, "srun prints no status on Ctrl-C anyway"),
                       "salloc": (W, "srun option")},
    "preserve-env": {"srun": (W, "the step's counts come from the command line"),
                     "salloc": (W, "srun option")},
    "cpu-bind": {"srun": (H, "with TaskPlugin=task/affinity (else ignored, as Slurm does): "
                             "none, cores/threads (default when tasks × cpus-per-task fill the "
                             "step), rank, map_cpu, mask_cpu, verbose; sockets/ldoms/boards "
                             "bind to all the step's CPUs on the node"),
                 "salloc": (W, "srun option")},
    "accel-bind": {"srun": (W, "no accelerator binding"), "salloc": (W, "srun option")},
    "resv-ports": {"srun": (W, "no reserved ports (MASTER_PORT is set)"),
                   "salloc": (W, "srun option")},
    "bcast": {"srun": (W, "the program is run from its path"), "salloc": (W, "srun option")},
    "send-libs": {"srun": (W, "the program is run from its path"), "salloc": (W, "srun option")},
    "compress": {"srun": (I, "no --bcast to compress"), "salloc": (W, "srun option")},
    "external-launcher": {"srun": (W, "not supported"), "salloc": (W, "srun option")},
    "quit-on-interrupt": {"srun": (W, "a second Ctrl-C within a second kills the step"),
                          "salloc": (W, "srun option")},
    "interactive": {"srun": (W, "not supported"), "salloc": (W, "srun option")},
    "threads": {"srun": (I, "srun's own launch threads"), "salloc": (W, "srun option")},
    "slurmd-debug": {"srun": (I, "debug level of slurmd"), "salloc": (W, "srun option")},
    "relative": {"srun": (H, "the step's nodes start at node N of the allocation (0 first); "
                             "not with -w/-x; N + the node count (-N, else the allocation's) "
                             "must not exceed the allocation"),
                 "salloc": (W, "srun option")},
    "bcast-exclude": {"srun": (W, "the program is run from its path"),
                      "salloc": (W, "srun option")},
    # ---- salloc's own --------------------------------------------------------------------------
    "kill-command": {"salloc": (H, "the signal (default TERM) goes to the command when the "
                                   "allocation is revoked (scancel, time limit); without it "
                                   "the command gets SIGHUP")},
    "bell": {"salloc": (H, "the bell rings on the terminal (stdout a tty) at the grant")},
    "no-bell": {"salloc": (H, "no bell, even after a wait of more than ten seconds")},
}


def lookup(command: str, option: str) -> tuple[str, str] | None:
    """(status, note) of ``--option`` for ``command``, or None when it has none."""
    got = STATUS.get(option)
    if isinstance(got, dict):
        return got.get(command)
    assert got is None or isinstance(got, tuple)
    return got


def warnings_for(command: str, options) -> list[str]:
    """The warning lines for the long option names in ``options`` (each once, in order)."""
    out = []
    for opt in dict.fromkeys(options):
        st = lookup(command, opt)
        if st is not None and st[0] == W:
            out.append(f"{command}: warning: --{opt} is not supported by Muster: {st[1]}; "
                       "ignored")
    return out


_CONTROLLER_REFUSES = {"licenses"}  # the controller answers with Slurm's errstr


def check(command: str, options) -> list[str]:
    """The warnings for the options used (long names); raises CliExit (exit 1) for the first
    option the command refuses itself."""
    for opt in options:
        st = lookup(command, opt)
        if st is not None and st[0] == R and opt not in _CONTROLLER_REFUSES:
            from muster.cli.getopt import CliExit
            raise CliExit([f"{command}: error: --{opt} is not supported by Muster: {st[1]}"], 1)
    return warnings_for(command, options)
