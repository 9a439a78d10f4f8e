"""srun --multi-prog: one program per task, from a configuration file. Standard library only.

The file has one record per line: a task list, then the program and its arguments. A task
list is ``*`` (every task no earlier record named) or comma-separated ids and ranges
(``0,2-3``). ``#`` starts a comment line; a line ending in ``\\`` continues on the next one.
In the program and arguments ``%t`` is the task id and ``%o`` the task's offset within its
record's list (for ``*``, the task id); another ``%X`` is dropped. Single quotes keep text as
it is (``%`` included) and a backslash keeps the next character; double quotes are ordinary
characters, as Slurm 22.05 treats them.

The file is read by srun, as the user, and every task's argv is sent with the step; errors
are Slurm's ("Line N of configuration file F invalid", exit 1)."""

from __future__ import annotations


class MultiProgError(Exception):
    """Every line of the message is one ``srun: error:`` line."""


def read(path: str) -> str:
    """The file's text (srun runs as the user: it reads what the user may read)."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            return fh.read(1 << 20)
    except OSError:
        raise MultiProgError(f"Could not open multi_prog config file {path}") from None


def task_count(text: str) -> int:
    """The step's task count when -n does not give it: one more than the highest task id
    the file names (at least 1); ``*`` names none."""
    top = 0
    for _, line in _records(text):
        head = line.strip().partition(" ")[0]
        if not head or head.startswith("#") or head == "*":
            continue
        for part in head.split(","):
            for bound in part.split("-"):
                if bound.isdigit():
                    top = max(top, int(bound) + 1)
    return max(top, 1)


def parse(text: str, path: str, ntasks: int) -> dict[int, list[str]]:
    """Task id → argv for every task of a step of ``ntasks`` tasks."""
    argv: dict[int, list[str]] = {}
    for number, line in _records(text):
        head, _, rest = line.strip().partition(" ")
        if not head or head.startswith("#"):
            continue
        words = _split(rest.strip())
        if not words:
            raise MultiProgError(f"Line {number} of configuration file {path} invalid")
        if head == "*":
            ids = [(t, t) for t in range(ntasks) if t not in argv]
        else:
            try:
                ids = _task_ids(head, ntasks)
            except MultiProgError as exc:
                raise MultiProgError(f"{exc}\nLine {number} of configuration file {path} "
                                     "invalid") from None
            dup = next((t for t, _ in ids if t in argv), None)
            if dup is not None:
                raise MultiProgError(f"Duplicate record for task {dup}\n"
                                     f"Line {number} of configuration file {path} invalid")
        for tid, offset in ids:
            argv[tid] = [_substitute(w, tid, offset) for w in words]
    missing = next((t for t in range(ntasks) if t not in argv), None)
    if missing is not None:
        raise MultiProgError(f"Configuration file {path} invalid, no record for task id "
                             f"{missing}")
    return argv


def _records(text: str):
    """(line number, logical line) with continuation lines joined."""
    pending, start = "", 0
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.replace("\t", " ")
        if not pending:
            start = number
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1] + " "
            continue
        yield start, pending + line
        pending = ""
    if pending:
        yield start, pending


def _task_ids(spec: str, ntasks: int) -> list[tuple[int, int]]:
    """(task id, offset) for a list of ids and ranges: the offset counts the record's tasks
    in the order listed (``0,2-3``: offsets 0, 1, 2), as Slurm's."""
    out: list[tuple[int, int]] = []
    for part in spec.split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise MultiProgError(f"Invalid task range specification ({part})")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise MultiProgError(f"Invalid task range specification ({part})")
        if b >= ntasks:
            raise MultiProgError(f"Invalid task id, {b} >= ntasks")
        base = len(out)
        out.extend((t, base + t - a) for t in range(a, b + 1))
    return out


_QUOTED = "\0"  # marks a '%' that single quotes kept literal


def _split(text: str) -> list[str]:
    """Words of a record: blanks separate, single quotes and a backslash keep text whole."""
    words: list[str] = []
    cur: list[str] = []
    started = False
    i = 0
    while i < len(text):
        c = text[i]
        if c == " ":
            if started:
                words.append("".join(cur))
                cur, started = [], False
        elif c == "'":
            end = text.find("'", i + 1)
            end = len(text) if end < 0 else end
            cur.append(text[i + 1:end].replace("%", _QUOTED))
            started, i = True, end
        elif c == "\\" and i + 1 < len(text):
            i += 1
            cur.append(_QUOTED if text[i] == "%" else text[i])
            started = True
        else:
            cur.append(c)
            started = True
        i += 1
    if started:
        words.append("".join(cur))
    return words


def _substitute(word: str, tid: int, offset: int) -> str:
    out = []
    i = 0
    while i < len(word):
        c = word[i]
        if c == "%" and i + 1 < len(word):
            nxt = word[i + 1]
            out.append(str(tid) if nxt == "t" else str(offset) if nxt == "o" else "")
            i += 2
            continue
        out.append("%" if c == _QUOTED else c)
        i += 1
    return "".join(out)
