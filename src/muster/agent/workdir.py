"""The shell snippet that enters a task's working directory as the task's user (shared by the
batch supervisor, the step daemon and the TaskEpilog wrapper). Pure strings."""

from __future__ import annotations

# The working directory is entered by the job's own shell, after the switch to the user's ids:
# never chdir as root, since a symlink swapped in between a check and root's chdir would put the
# job in a directory its user cannot enter (CPython's Popen(cwd=, user=) chdirs before setuid).
# Arguments: $1 the directory, $2 the submitter's PWD (kept when it names the same directory, as
# a shell started there would keep it), $3 "x" + the submitter's OLDPWD, or "" when unset (cd
# sets OLDPWD); plain shell builtins, no variables of ours (they could clash with the job's).
# The failure message is Slurm's, with its errno text.
WORKDIR = (
    'cd -P -- "$1" 2>/dev/null || { '
    'if [ -d "$1" ]; then set -- "Permission denied" "$@"; '
    'elif [ -e "$1" ]; then set -- "Not a directory" "$@"; '
    'else set -- "No such file or directory" "$@"; fi; '
    'printf "slurmstepd: error: couldn\'t chdir to \\`%s\': %s: going to /tmp instead\\n" '
    '"$2" "$1" >&2; shift; cd /tmp || exit 1; }; '
    '[ -n "$2" ] && [ "$2" -ef . ] && PWD=$2; '
    'case $3 in x*) OLDPWD=${3#x};; *) unset OLDPWD;; esac; shift 3; ')


def workdir_args(work_dir: str, env: dict) -> list[str]:
    """The positional arguments ``WORKDIR`` reads ($1-$3)."""
    old = env.get("OLDPWD")
    return [work_dir, env.get("PWD") or "", "" if old is None else "x" + old]
