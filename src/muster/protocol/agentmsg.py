"""The messages a node agent (musterd) sends its controller, as a tagged union on ``op``.

The controller converts every sealed agent frame into one of these before acting on it
(:func:`from_agent`): types are strict (an ``int`` field takes no string, float or bool), so
handlers read attributes they can trust; a frame that does not fit is refused with
:class:`Malformed` — logged and dropped, never an exception that ends the link. Unknown
extra keys are ignored, so an agent one version ahead can still report.

The bodies of ``job_ended``/``step_ended`` are also what the agent keeps on disk
(status.json) and repeats in its registration (``finished``/``steps_finished``), there without
the ``op`` key: a tagged Struct decoded on its own does not require its tag.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec

__all__ = ["AgentMessage", "AgentRegister", "EpilogDone", "Health", "Heartbeat", "JobEnded",
           "JobStarted", "Malformed", "PrologDone", "StepEnded", "StepUsage", "TaskExit",
           "PROTOCOL_VERSION", "from_agent", "incompatible", "registration"]


class Malformed(ValueError):
    """An agent frame that is not one of the messages below (the reason is msgspec's)."""


# The agent<->controller protocol version (issue 16: rolling upgrades). Each side announces
# its own (the agent in its registration, the controller in the reply) and accepts a peer
# at most one version apart, so controller and agents can be upgraded one at a time. Bump it
# when a message changes in a way the previous release cannot read, and keep reading the
# previous version's messages for one release. An agent from before versions were exchanged
# announces nothing: version 1.
PROTOCOL_VERSION = 2
UNVERSIONED = 1


def incompatible(peer: int, ours: int = PROTOCOL_VERSION) -> str | None:
    """Why a peer speaking version ``peer`` cannot be served (None when it can)."""
    if abs(peer - ours) <= 1:
        return None
    return (f"protocol version {peer} is incompatible with this side's {ours} (peers must be "
            f"at most one version apart: upgrade the older one)")


class _Msg(msgspec.Struct, kw_only=True, tag_field="op"):
    pass


class Heartbeat(_Msg, kw_only=True, tag="heartbeat"):
    load: float | None = None      # 1-minute load average
    free_mem: int | None = None    # MB


class JobStarted(_Msg, kw_only=True, tag="job_started"):
    job_id: int
    run: int = 0


class JobEnded(_Msg, kw_only=True, tag="job_ended"):
    """The end of a batch job's run (its supervisor's status.json). ``terminated``: why the
    agent killed it (``cancel``, ``timeout``, ...), None when the script ended by itself."""
    job_id: int
    run: int = 0
    exit_code: int = 0
    signal: int = 0
    timed_out: bool = False
    terminated: str | None = None
    start_time: int | None = None
    end_time: int | None = None
    launch_failed: bool = False
    launch_error: str | None = None
    oom_kills: int = 0
    lost: bool = False             # the agent no longer knows the job (set by the controller)
    usage: dict[str, Any] | None = None
    task_epilog_error: str | None = None


class TaskExit(msgspec.Struct, kw_only=True):
    task: int
    exit_code: int
    signal: int


class StepEnded(_Msg, kw_only=True, tag="step_ended"):
    """One node's end of an srun step (its step daemon's status.json)."""
    job_id: int
    step_id: int
    run: int = 0
    node: str | None = None
    tasks: list[TaskExit] = []
    start_time: int | None = None
    end_time: int | None = None
    terminated: str | None = None
    launch_failed: bool = False
    launch_error: str | None = None  # why (the cgroup, a container): added without a bump
    oom_kills: int = 0
    usage: dict[str, Any] | None = None
    task_epilog_error: str | None = None


class StepUsage(_Msg, kw_only=True, tag="step_usage"):
    """A live usage sample of a running step (``step_id`` ``"batch"`` or a number).
    ``pids``: the step's processes on the node at the sample (``sstat -i``); live only, never
    part of the final ``usage``. Added without a protocol bump: an older controller ignores
    it, an older agent sends none."""
    job_id: int
    step_id: int | str
    run: int = 0
    node: str | None = None
    usage: dict[str, Any] | None = None
    pids: list[int] = []


class Health(_Msg, kw_only=True, tag="health"):
    ok: bool
    message: str = ""


class PrologDone(_Msg, kw_only=True, tag="prolog_done"):
    job_id: int
    run: int = 0
    ok: bool
    exit_code: int = 0
    signal: int = 0
    timed_out: bool = False
    detail: str = ""


class EpilogDone(PrologDone, kw_only=True, tag="epilog_done"):
    pass


class AgentRegister(_Msg, kw_only=True, tag="agent_register"):
    """An agent's first sealed frame: what it runs and what ended while it was away."""
    node: str
    cpus: int | None = None
    mem: int | None = None
    running: list[int] = []
    finished: list[JobEnded] = []
    steps_running: list[list[int]] = []   # [job, step, run] each
    steps_finished: list[StepEnded] = []
    version: str = ""
    arch: str = ""
    os: str = ""
    boot_time: int | None = None
    agent_start: int | None = None
    proto: int = UNVERSIONED  # PROTOCOL_VERSION of the agent


AgentMessage = (Heartbeat | JobStarted | JobEnded | StepEnded | StepUsage | Health | PrologDone
                | EpilogDone)


def from_agent(msg: object) -> AgentMessage:
    """The typed message of a decoded agent frame; :class:`Malformed` if it is none."""
    try:
        return cast(AgentMessage, msgspec.convert(msg, AgentMessage))
    except msgspec.ValidationError as exc:
        raise Malformed(str(exc)) from None


def registration(msg: object) -> AgentRegister:
    """The typed ``agent_register`` frame; :class:`Malformed` if it is not one."""
    if not isinstance(msg, dict) or msg.get("op") != "agent_register":
        raise Malformed("not an agent registration")
    try:
        return msgspec.convert(msg, AgentRegister)
    except msgspec.ValidationError as exc:
        raise Malformed(str(exc)) from None
