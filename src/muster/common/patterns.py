"""Output/input filename patterns (``-o/-e/-i``), cli.md §2.

Standard library only: the CLI imports this module.

Codes: ``%%`` ``%j`` ``%J`` ``%A`` ``%a`` ``%s`` ``%t`` ``%n`` ``%N`` ``%u`` ``%x``;
``%<digits><code>`` zero-pads numeric values (width capped at 10); a backslash anywhere
disables all substitution (backslashes are removed); unknown codes stay verbatim.

Two-stage expansion: the controller does not know which node will run the task, so it calls
``expand_pattern(..., node=None)``. If the pattern has a live ``%N`` (``has_node_pattern``),
that result is itself a pattern: every code but ``%N`` is resolved and every literal ``%``
(from ``%%``, unknown codes or substituted values) is doubled, so the agent finishes it with
``expand_pattern(partial, job_id=..., node=host)`` and gets exactly what a one-shot
expansion would give. Without a live ``%N`` the result is already final.
"""

from __future__ import annotations

__all__ = ["NO_ARRAY_TASK", "expand_pattern", "has_node_pattern"]

#: ``%a`` of a job that is not an array task (Slurm's NO_VAL - 1).
NO_ARRAY_TASK = 4294967294
_MAX_WIDTH = 10
_CODES = frozenset("%jJAastnNux")


def _scan(pattern: str):
    """Yield ``(literal, None, None)`` or ``(raw, code, width)`` pieces of a pattern."""
    i = 0
    n = len(pattern)
    lit_start = 0
    while i < n:
        if pattern[i] != "%":
            i += 1
            continue
        j = i + 1
        while j < n and pattern[j] in "0123456789":
            j += 1
        if j < n and pattern[j] in _CODES and not (pattern[j] == "%" and j > i + 1):
            if i > lit_start:
                yield pattern[lit_start:i], None, None
            width = min(int(pattern[i + 1 : j]), _MAX_WIDTH) if j > i + 1 else 0
            yield pattern[i : j + 1], pattern[j], width
            i = lit_start = j + 1
        else:
            i += 1  # unknown code or lone '%': stays literal
    if lit_start < n:
        yield pattern[lit_start:], None, None


def has_node_pattern(pattern: str) -> bool:
    """True when the pattern contains a live ``%N`` (no backslash, not ``%%N``)."""
    if "\\" in pattern:
        return False
    return any(code == "N" for _, code, _ in _scan(pattern))


def expand_pattern(
    pattern: str,
    *,
    job_id: int,
    array_job_id: int | None = None,
    array_task_id: int | None = None,
    user: str = "",
    name: str = "",
    node: str | None = None,
    step: str = "batch",
    task: int = 0,
    node_index: int = 0,
) -> str:
    """Expand a filename pattern; see the module docstring for codes and ``node=None``.

    ``%A`` is the job id when not an array; ``%a`` is 4294967294 when not an array task;
    ``%s`` is ``step`` (``batch`` for the batch script); ``%J`` is ``jobid`` for the batch
    step and ``jobid.step`` otherwise.
    """
    if "\\" in pattern:
        return pattern.replace("\\", "")
    partial = node is None and has_node_pattern(pattern)

    def num(value: int, width: int) -> str:
        return str(value).zfill(width)

    out: list[str] = []
    for raw, code, width in _scan(pattern):
        if code is None:
            text = raw
        elif code == "%":
            text = "%"
        elif code == "j":
            text = num(job_id, width)
        elif code == "J":
            text = num(job_id, width) if step == "batch" else f"{num(job_id, width)}.{step}"
        elif code == "A":
            text = num(array_job_id if array_job_id is not None else job_id, width)
        elif code == "a":
            text = num(array_task_id if array_task_id is not None else NO_ARRAY_TASK, width)
        elif code == "s":
            text = step.zfill(width) if step.isdigit() else step
        elif code == "t":
            text = num(task, width)
        elif code == "n":
            text = num(node_index, width)
        elif code == "N":
            if node is None:
                out.append("%N")
                continue
            text = node
        elif code == "u":
            text = user
        else:  # "x"
            text = name
        out.append(text.replace("%", "%%") if partial else text)
    return "".join(out)
