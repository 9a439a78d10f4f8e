"""Job dependencies (``-d``): parse, evaluate, display. Pure.

A dependency is a list of terms joined by ``,`` (all must hold) or ``?`` (any may hold).
A term is ``(kind, job_id, task_id|None, minutes)``; ``singleton`` has job_id 0.

Evaluation of one term against the referenced job(s) gives one of:
  SATISFIED — condition met, the term is dropped from the displayed dependency
  WAITING   — may still be met (``(unfulfilled)``)
  FAILED    — can never be met (``(failed)``) → reason DependencyNeverSatisfied
A reference to an array master means *all* of its tasks (pending ones included).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from muster.common.errors import RequestError

KINDS = ("after", "afterany", "afterok", "afternotok", "aftercorr", "singleton")
SATISFIED, WAITING, FAILED = "satisfied", "waiting", "failed"

# [kind, job_id, task_id | None, minutes]: a list, as stored (JSON) with the job
Term = list[Any]


def parse(spec: str) -> tuple[list[Term], bool]:
    """``afterok:1:2,after:3+5,singleton`` → (terms, any). Raises RequestError('dependency')."""
    bad = RequestError(None, "dependency")
    spec = spec.strip()
    if not spec or ("," in spec and "?" in spec):
        raise bad
    any_ = "?" in spec
    terms: list[Term] = []
    for part in spec.split("?" if any_ else ","):
        if part == "singleton":
            terms.append(["singleton", 0, None, 0])
            continue
        kind, sep, rest = part.partition(":")
        if kind not in KINDS or kind == "singleton" or not sep or not rest:
            raise bad
        for ref in rest.split(":"):
            minutes = 0
            if "+" in ref:
                if kind != "after":
                    raise bad
                ref, _, m = ref.partition("+")
                if not m.isdigit():
                    raise bad
                minutes = int(m)
            jid, _, task = ref.partition("_")
            if not jid.isdigit() or (task and not task.isdigit()) or int(jid) <= 0:
                raise bad
            terms.append([kind, int(jid), int(task) if task else None, minutes])
    if len(terms) > 1000:
        raise bad
    return terms, any_


def _term_state(kind: str, members: list[Any], now: int, minutes: int) -> str:
    """members: the referenced jobs (objects with state/start_time/terminal/exit fields)."""
    if not members:
        return FAILED
    if kind == "after":
        results = []
        for m in members:
            if m.start_time is not None and now >= m.start_time + 60 * minutes:
                results.append(SATISFIED)
            elif m.terminal and m.start_time is None:
                results.append(SATISFIED)  # cancelled before it started
            else:
                results.append(WAITING)
        return WAITING if WAITING in results else SATISFIED
    if any(not m.terminal or getattr(m, "completing", False) for m in members):
        if kind == "afterok" and any(m.terminal and m.state != "COMPLETED" for m in members):
            return FAILED
        return WAITING
    ok = [m.state == "COMPLETED" for m in members]
    if kind in ("afterany", "aftercorr"):
        return SATISFIED
    if kind == "afterok":
        return SATISFIED if all(ok) else FAILED
    if kind == "afternotok":
        return SATISFIED if not all(ok) else FAILED
    return WAITING


def evaluate(terms: list[Term], any_: bool, lookup: Callable[[int, int | None], list[Any]],
             singleton_clear: Callable[[], bool], now: int) -> tuple[str, str | None]:
    """Overall state and the display string of the remaining terms (None when all met)."""
    states = []
    shown = []
    for kind, jid, task, minutes in terms:
        if kind == "singleton":
            st = SATISFIED if singleton_clear() else WAITING
            text = "singleton"
        else:
            st = _term_state(kind, lookup(jid, task), now, minutes)
            ref = f"{jid}_{task}" if task is not None else str(jid)
            text = f"{kind}:{ref}" + (f"+{minutes}" if minutes else "")
        states.append(st)
        if st != SATISFIED:
            shown.append(f"{text}({'unfulfilled' if st == WAITING else 'failed'})")
    sep = "?" if any_ else ","
    if any_:
        if SATISFIED in states:
            return SATISFIED, None
        overall = WAITING if WAITING in states else FAILED
    else:
        if FAILED in states:
            overall = FAILED
        elif WAITING in states:
            overall = WAITING
        else:
            return SATISFIED, None
    return overall, sep.join(shown)


def referenced_ids(terms: Iterable[Term]) -> set[int]:
    return {t[1] for t in terms if t[0] != "singleton"}
