"""muster.agent.confine's arithmetic: Slurm's task/cgroup memory limits, CPU slots."""

from types import SimpleNamespace

from muster.agent.confine import (MB, AgentConfinement, Settings, memory_limits, ram_limit,
                                  swap_limit)


def test_ram_limit_is_the_allocation_within_min_and_max():
    s = Settings(ram=True)
    assert ram_limit(s, 100, 4000) == 100 * MB
    assert ram_limit(s, 0, 4000) == 4000 * MB  # no allocation: the whole node
    assert ram_limit(s, 10, 4000) == 30 * MB  # MinRAMSpace
    assert ram_limit(Settings(ram=True, max_ram_percent=50), 3000, 4000) == 2000 * MB
    assert ram_limit(Settings(ram=True, allowed_ram=150), 100, 4000) == 150 * MB


def test_swap_limit_adds_allowed_swap_within_max_swap():
    s = Settings(ram=True, swap=True, allowed_swap=50)
    assert swap_limit(s, 100, 4000) == 150 * MB
    assert swap_limit(Settings(swap=True, allowed_swap=0), 100, 4000) == 100 * MB
    capped = Settings(swap=True, allowed_swap=100, max_ram_percent=10, max_swap_percent=5)
    assert swap_limit(capped, 1000, 4000) == 600 * MB


def test_memory_limits_as_set_memory_takes_them():
    assert memory_limits(Settings(), 100, 4000) == (None, None)
    assert memory_limits(Settings(ram=True), 100, 4000) == (100 * MB, None)
    assert memory_limits(Settings(ram=True, swap=True), 100, 4000) == (100 * MB, 0)
    assert memory_limits(Settings(ram=True, swap=True, allowed_swap=20), 100, 4000) == \
        (100 * MB, 20 * MB)
    # swap constrained, RAM not: the RAM limit is RAM + swap (Slurm)
    assert memory_limits(Settings(swap=True, allowed_swap=20), 100, 4000) == (120 * MB, 0)


def _agent(cpus: int, host: list[int], offset: int = 0) -> AgentConfinement:
    a = AgentConfinement.__new__(AgentConfinement)
    a.node = SimpleNamespace(cpus=cpus, name="n1")
    a.host, a.offset, a.specs = host, offset, {}
    return a


def test_slots_are_the_lowest_free_and_wrap_when_oversubscribed():
    a = _agent(4, [0, 1])
    first = a._take_slots(2)
    a.specs[1] = {"slots": first}
    second = a._take_slots(1)
    a.specs[2] = {"slots": second}
    assert (first, second) == ([0, 1], [2])
    assert a._take_slots(3) == [0, 1, 3]  # one free slot, then the others are shared
    assert a._take_slots(9) == [0, 1, 2, 3]  # never more slots than the node has


def test_muster_up_no_confine_turns_tracking_and_constraints_off():
    from muster.cli.muster import _confinement
    glob: dict = {}
    text = _confinement(glob, wanted=False)
    assert glob == {"ProctrackType": "proctrack/pgid", "TaskPlugin": "task/none"}
    assert "Constrain" not in text
