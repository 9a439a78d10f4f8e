"""The node state machine: ``handle(node, event, now) -> (changes, effects)``. Pure.

A node's administrative state is three fields of the controller's NodeRuntime (``down``,
``drain``, and ``down_auto`` = DOWN set by the controller itself) plus the reason triple
(``reason``, ``reason_user``, ``reason_time``). Connection state (``connected``) and
allocations are not this machine's: they follow the agent link and the jobs.

Transition table (``TABLE``; ``-`` = refused):

    event \\ phase   UP            DRAIN          DOWN
    NodeDown        down          down           down (new reason)
    NodeDrain       drain         drain (reason) drain (stays DOWN)
    NodeResume      resume        resume         resume
    NodeSilent      down (auto)   down (auto)    -
    NodeRegistered  -             -              up (ReturnToService)

``down`` also fails the node's jobs: the effect ``FailJobs`` asks the controller to deliver
``NodeFailed`` to each job still running (or completing) on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from muster.lifecycle import effects as fx
from muster.lifecycle import events as ev

UP, DRAIN, DOWN = "UP", "DRAIN", "DOWN"
PHASES = (UP, DRAIN, DOWN)


@dataclass(frozen=True)
class FailJobs:
    """Deliver ``NodeFailed(node)`` to the jobs still running or completing on ``node``."""
    node: str


class Refused(Exception):
    pass


class NodeRecord(Protocol):
    """What the machine reads of a node (the controller's NodeRuntime)."""
    name: str
    down: bool
    drain: bool
    down_auto: bool


def phase(node: NodeRecord) -> str:
    if node.down:
        return DOWN
    return DRAIN if node.drain else UP


def _down(node: NodeRecord, e: ev.NodeDown, now: int) -> fx.Outcome:
    fields = {"down": True, "down_auto": e.auto, "reason": e.reason, "reason_user": e.user,
              "reason_time": now}
    return ((fx.SetFields(fields), fx.Log("node_down", e.reason)),
            (FailJobs(node.name), fx.Schedule()))


def _silent(node: NodeRecord, e: ev.NodeSilent, now: int) -> fx.Outcome:
    return _down(node, ev.NodeDown("Not responding", "slurm", auto=True), now)


def _drain(node: NodeRecord, e: ev.NodeDrain, now: int) -> fx.Outcome:
    fields = {"drain": True, "reason": e.reason, "reason_user": e.user, "reason_time": now}
    text = f"{e.reason}: {e.detail}"[:500] if e.detail else e.reason
    return (fx.SetFields(fields), fx.Log("node_drain", text)), (fx.Schedule(),)


def _resume(node: NodeRecord, e: ev.NodeResume, now: int) -> fx.Outcome:
    fields = {"drain": False, "down": False, "reason": None, "reason_user": None,
              "reason_time": None}
    return (fx.SetFields(fields), fx.Log("node_resume", "")), (fx.Schedule(),)


def _registered(node: NodeRecord, e: ev.NodeRegistered, now: int) -> fx.Outcome:
    rts = e.return_to_service
    if not (rts == 2 or (rts == 1 and node.down_auto)):
        return (), ()  # ReturnToService=1: DOWN by an administrator stays DOWN
    fields = {"down": False, "down_auto": False, "reason": None, "reason_user": None,
              "reason_time": None}
    return (fx.SetFields(fields), fx.Log("node_returned", "agent registered")), (fx.Schedule(),)


TABLE: dict[tuple[str, type], Callable[[NodeRecord, Any, int], fx.Outcome]] = {
    (UP, ev.NodeDown): _down, (DRAIN, ev.NodeDown): _down, (DOWN, ev.NodeDown): _down,
    (UP, ev.NodeDrain): _drain, (DRAIN, ev.NodeDrain): _drain, (DOWN, ev.NodeDrain): _drain,
    (UP, ev.NodeResume): _resume, (DRAIN, ev.NodeResume): _resume,
    (DOWN, ev.NodeResume): _resume,
    (UP, ev.NodeSilent): _silent, (DRAIN, ev.NodeSilent): _silent,
    (DOWN, ev.NodeRegistered): _registered,
}
REFUSED: dict[tuple[str, type], str] = {
    (DOWN, ev.NodeSilent): "already down",
    (UP, ev.NodeRegistered): "nothing to undo",
    (DRAIN, ev.NodeRegistered): "a drain outlives the agent's restarts",
}


def handle(node: NodeRecord, event: object, now: int) -> fx.Outcome:
    key = (phase(node), type(event))
    fn = TABLE.get(key)
    if fn is None:
        raise Refused(REFUSED.get(key, f"no transition for {key}"))
    return fn(node, event, now)
