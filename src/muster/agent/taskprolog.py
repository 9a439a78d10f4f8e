"""TaskProlog and TaskEpilog (slurm.conf): the admin's programs run as the job's user around
every task, the batch script included.

TaskProlog runs inside the task itself, in its wrapper shell (supervisor ``_WRAPPER``, step
daemon ``_TASK_WRAPPER``), after the switch to the user's ids and the ``cd`` into the working
directory, just before the ``exec`` of the command — so no Python ever runs as the user, and
the program sees the task's environment plus ``SLURM_TASK_PID`` and
``SLURM_SCRIPT_CONTEXT=prolog_task``. Its stdin and stderr are /dev/null; its stdout is read
line by line as Slurm's slurmstepd does (``_proc_stdout``):

  ``export NAME=value``  sets NAME in the task's environment (spaces around NAME are dropped,
                         the value is everything after ``=``, taken literally);
  ``unset NAME``         removes NAME;
  ``print text``         writes ``text`` (leading blanks dropped) to the task's stdout;
  anything else          is ignored.

The lines are parsed by the shell's own ``read``/``case`` and assigned with ``export
"$name=$value"``: a value is data, never evaluated. A name that is not a shell name is skipped.
A TaskProlog that exits non-zero ends the task with that status (Slurm: "TaskProlog failed
status=N"), printed on the task's stderr.

TaskEpilog runs after each task has ended (:func:`run_task_epilog`), as the user, started by
the supervisor or step daemon through the same kind of wrapper (C fork/exec of /bin/sh, which
enters the working directory as the user), with the task's environment and
``SLURM_SCRIPT_CONTEXT=epilog_task``; output discarded, a failure only logged (Slurm).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess

EXEC = 'exec "$0" "$@"'
_BLANKS = " \t"

# $1: the TaskProlog's path (shell-quoted into the snippet by with_task_prolog). Variables are
# _muster_* (unexported, unset again before the exec) so none of the job's is touched.
_SNIPPET = (
    '_muster_o=$(SLURM_SCRIPT_CONTEXT=prolog_task {path} </dev/null 2>/dev/null); '
    '_muster_r=$?; '
    'if [ "$_muster_r" -ne 0 ]; then '
    'printf "{who} failed status=%s\\n" "$_muster_r" >&2; '
    'exit "$_muster_r"; fi; '
    'while IFS= read -r _muster_l; do case $_muster_l in '
    '"print "*) _muster_l=${{_muster_l#print }}; '
    '_muster_l=${{_muster_l#"${{_muster_l%%[!{b}]*}}"}}; printf "%s\\n" "$_muster_l";; '
    '"export "*) _muster_l=${{_muster_l#export }}; '
    '_muster_l=${{_muster_l#"${{_muster_l%%[!{b}]*}}"}}; '
    'case $_muster_l in *=*) _muster_n=${{_muster_l%%=*}}; '
    '_muster_n=${{_muster_n%"${{_muster_n##*[!{b}]}}"}}; '
    'case $_muster_n in ""|[0-9]*|*[!A-Za-z0-9_]*) ;; '
    '*) export "$_muster_n=${{_muster_l#*=}}";; esac;; esac;; '
    '"unset "*) _muster_n=${{_muster_l#unset }}; '
    '_muster_n=${{_muster_n#"${{_muster_n%%[!{b}]*}}"}}; '
    '_muster_n=${{_muster_n%"${{_muster_n##*[!{b}]}}"}}; '
    'case $_muster_n in ""|[0-9]*|*[!A-Za-z0-9_]*) ;; *) unset "$_muster_n";; esac;; '
    'esac; done <<_MUSTER_TASK_PROLOG_\n'
    '$_muster_o\n'
    '_MUSTER_TASK_PROLOG_\n'
    'unset _muster_o _muster_r _muster_l _muster_n; ')


def with_task_prolog(wrapper: str, path: str | None,
                     who: str = "slurmstepd: error: TaskProlog") -> str:
    """``wrapper`` (a task wrapper ending in ``exec "$0" "$@"``) running TaskProlog ``path``
    right before that exec; unchanged when there is none. ``who`` starts the line that
    reports its failure."""
    if not path:
        return wrapper
    head, sep, tail = wrapper.rpartition(EXEC)
    if not sep or tail:
        raise ValueError("task wrapper does not end with the command's exec")
    return head + _SNIPPET.format(path=shlex.quote(path), b=_BLANKS, who=who) + EXEC


# srun --task-prolog's path is the user's: checked (as the user, in the wrapper) the way
# slurmstepd's run_command does before it runs it; {p} the quoted path, {n} "slurmstepd-NODE"
_USER_CHECK = (
    '_muster_p={p}; _muster_w=; case $_muster_p in /*) '
    '[ -f "$_muster_p" ] && [ -x "$_muster_p" ] || {{ [ -e "$_muster_p" ] && '
    '_muster_w="Permission denied" || _muster_w="No such file or directory"; '
    '_muster_w="can not be executed ($_muster_p) $_muster_w"; }};; '
    '*) _muster_w="is not fully qualified pathname ($_muster_p)";; esac; '
    'if [ -n "$_muster_w" ]; then printf "%s\n" '
    '"{n}: error: run_command: user task_prolog $_muster_w" '
    '"{n}: error: user task_prolog did not exit normally. reason: Run command failed - '
    'configuration error" "{n}: error: --task-prolog failed status=1" >&2; exit 1; fi; '
    'unset _muster_p _muster_w; ')


def with_user_task_prolog(wrapper: str, path: str | None, node: str) -> str:
    """``wrapper`` running srun's ``--task-prolog`` ``path`` (after slurm.conf's TaskProlog,
    as Slurm orders them), with TaskProlog's output rules: it is the user's own program,
    run as the user like the task. A path that is not absolute, or not an executable file,
    fails the task with status 1 and Slurm's three error lines."""
    if not path:
        return wrapper
    name = "slurmstepd-" + "".join(c for c in node if c.isalnum() or c in "-_.")
    head, _, _ = wrapper.rpartition(EXEC)
    checked = head + _USER_CHECK.format(p=shlex.quote(path), n=name) + EXEC
    return with_task_prolog(checked, path, f"{name}: error: --task-prolog")


# The TaskEpilog's wrapper: $0 the program, $1-$3 workdir.WORKDIR's arguments.
def _epilog_argv(path: str, work_dir: str, env: dict) -> list[str]:
    from muster.agent.workdir import WORKDIR, workdir_args
    return ["/bin/sh", "-c", WORKDIR + 'exec "$0"', path, *workdir_args(work_dir, env)]


def run_task_epilog(L: dict, env: dict, task_pid: int | None, work_dir: str,
                    key: str = "task_epilog") -> str | None:
    """Run the launch's TaskEpilog (``key``: ``user_task_epilog`` for srun's --task-epilog,
    the user's own program, run the same way) for one ended task and wait for it (at most the
    launch's ``task_epilog_timeout`` seconds, then its process group is killed). Returns a
    line saying what went wrong, or None. Never raises: a TaskEpilog cannot fail the job."""
    path = L.get(key)
    if not path:
        return None
    if not path.startswith("/"):
        return f"run_command: user task_epilog is not fully qualified pathname ({path})"
    env = {**env, "SLURM_SCRIPT_CONTEXT": "epilog_task"}
    if task_pid:
        env["SLURM_TASK_PID"] = str(task_pid)
    uid, gid = L["uid"], L["gid"]
    kw = {}
    if os.getuid() == 0 and uid != 0:
        kw = {"user": uid, "group": gid, "extra_groups": L.get("groups") or [gid]}
    elif os.getuid() not in (0, uid):
        return "TaskEpilog not run: the agent cannot switch to the job's user"
    try:
        proc = subprocess.Popen(_epilog_argv(path, work_dir, env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                                env=env, start_new_session=True, close_fds=True,
                                umask=L.get("umask", 0o022), **kw)
    except OSError as exc:
        return f"TaskEpilog {path}: {exc}"
    timeout = L.get("task_epilog_timeout")
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _killpg(proc.pid)
        proc.wait()
        return f"TaskEpilog {path} timed out after {timeout}s"
    _killpg(proc.pid)  # what it left in its group (Slurm kills the script's children too)
    return None if rc == 0 else f"TaskEpilog {path} failed status={rc}"


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
