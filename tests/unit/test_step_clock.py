"""The controller's per-second duties towards steps (StepManager.tick) and the routing of
``scancel --signal`` (StepManager.signal_job): which nodes get which message, and when.
The controller is a recorder here; the real delivery is covered by tests/e2e/test_signals.py."""

import contextlib
from types import SimpleNamespace

from muster.controller.applier import Applier
from muster.controller.steps import StepManager
from muster.model.alloc import NodeAlloc
from muster.model.job import PENDING, RUNNING, Job


class Ctl:
    """The controller's surface the step manager and the real applier use: signals go
    through the job machine (``SignalJob``) and the applier's dispatch to ``send_to_node``."""

    def __init__(self, *jobs):
        self.cfg = SimpleNamespace(raw={}, requeue_exit=(), requeue_exit_hold=())
        self.requeue_delay = 2
        self.sent: list[tuple[str, dict]] = []
        self.saved: list[int] = []
        self.state = SimpleNamespace(jobs={j.job_id: j for j in jobs},
                                     save=lambda j: self.saved.append(j.job_id),
                                     event=lambda *a, **k: None,
                                     store=SimpleNamespace(transaction=contextlib.nullcontext))
        self.applier = Applier(self)

    def send_to_node(self, node, msg):
        self.sent.append((node, msg))

    def ops(self):
        return [(n, m["op"], m.get("scope"), m.get("signal"), m.get("cont")) for n, m in self.sent]


def job(jid=1, *, spec=None, batch=True, state=RUNNING, end=1000, restarts=0):
    return Job(job_id=jid, state=state, batch=batch, end_time=end, restarts=restarts,
               batch_host="n1", alloc=(NodeAlloc("n1", 1, 0), NodeAlloc("n2", 1, 0)), signal_spec=spec)


def test_warning_goes_to_the_steps_of_every_node_once_per_run():
    j = job(spec={"signal": 10, "secs": 55, "batch": False})
    ctl = Ctl(j)
    m = StepManager(ctl)
    m.tick(1000 - 56)
    assert ctl.sent == []
    m.tick(1000 - 55)
    assert ctl.ops() == [("n1", "signal", "steps", 10, True), ("n2", "signal", "steps", 10, True)]
    assert j.signal_spec["warned"] == 0 and ctl.saved == [1]  # stored: a restart sends no second
    ctl.sent.clear()
    m.tick(1000 - 54)
    StepManager(ctl).tick(1000 - 53)  # a restarted controller
    assert ctl.sent == []
    j.restarts, j.end_time = 1, 2000  # requeued and running again: re-armed
    m.tick(2000 - 50)
    assert [o[2] for o in ctl.ops()] == ["steps", "steps"]


def test_b_warning_is_the_supervisors_and_other_jobs_are_left_alone():
    ctl = Ctl(job(1, spec={"signal": 10, "secs": 55, "batch": True}),
              job(2, spec={"signal": 10, "secs": 55}, state=PENDING),
              job(3, spec={"signal": 10, "secs": 55}, end=None))
    StepManager(ctl).tick(999)
    assert ctl.sent == []


def test_an_interactive_allocations_steps_are_warned_too():
    ctl = Ctl(job(spec={"signal": 12, "secs": 30}, batch=False))
    StepManager(ctl).tick(980)
    assert {o[2] for o in ctl.ops()} == {"steps"}


def test_at_a_batch_jobs_limit_every_node_ends_the_steps_once():
    ctl = Ctl(job())
    m = StepManager(ctl)
    m.tick(999)
    assert ctl.sent == []
    m.tick(1000)
    m.tick(1001)
    assert ctl.ops() == [("n1", "terminate", "steps", None, None),
                         ("n2", "terminate", "steps", None, None)]
    assert all(msg["why"] == "timeout" for _, msg in ctl.sent)


def test_scancel_routes_by_scope():
    j = job()
    for scope, nodes in (("steps", ["n1", "n2"]), ("full", ["n1", "n2"]), ("batch", ["n1"])):
        ctl = Ctl(j)
        StepManager(ctl).signal_job(j, 12, scope)
        assert [(n, s) for n, _, s, _, _ in ctl.ops()] == [(n, scope) for n in nodes]
    ctl = Ctl()
    StepManager(ctl).signal_job(job(batch=False), 12, "batch")  # no batch shell: nothing
    assert ctl.sent == []
