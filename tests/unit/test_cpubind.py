"""muster.common.cpubind: srun --cpu-bind parsing, Slurm's auto-binding rule, per-task CPU
lists, SLURM_CPU_BIND* and the verbose line."""

from __future__ import annotations

import pytest

from muster.common.cpubind import CpuBind, effective, env, parse, task_cpus, verbose_line


@pytest.mark.parametrize("spec,kind,values,verbose", [
    ("cores", "cores", (), False),
    ("core", "cores", (), False),
    ("threads", "threads", (), False),
    ("none", "none", (), False),
    ("no", "none", (), False),
    ("verbose,cores", "cores", (), True),
    ("v,none", "none", (), True),
    ("quiet", None, (), False),
    ("verbose", None, (), True),
    ("map_cpu:0,2,4", "map_cpu", (0, 2, 4), False),
    ("map_cpu:1*2,3", "map_cpu", (1, 1, 3), False),
    ("map_cpu:0x10", "map_cpu", (16,), False),
    ("mask_cpu:0x3,0xC", "mask_cpu", (3, 12), False),
    ("mask_cpu:3,f0,verbose", "mask_cpu", (3, 0xF0), True),
    ("MAP_CPU:5", "map_cpu", (5,), False),
    ("cores,map_cpu:1", "map_cpu", (1,), False),  # the last type wins
    ("sockets", "sockets", (), False),
])
def test_parse(spec, kind, values, verbose):
    assert parse(spec) == CpuBind(kind, values, verbose)


@pytest.mark.parametrize("spec,message", [
    ("bogus", 'unrecognized --cpu-bind argument "bogus"'),
    ("cores,bogus", 'unrecognized --cpu-bind argument "bogus"'),
    ("map_cpu:", 'missing list for "--cpu-bind=map_cpu:<list>"'),
    ("mask_cpu:", 'missing list for "--cpu-bind=mask_cpu:<list>"'),
    ("mask_cpu:0", "no CPU set"),
    ("map_cpu:x1", "invalid --cpu-bind list entry"),
    ("map_cpu:1*0", "invalid --cpu-bind list entry"),
    ("cores:2", 'unrecognized --cpu-bind argument "cores:2"'),
])
def test_parse_refuses(spec, message):
    with pytest.raises(ValueError) as ei:
        parse(spec)
    assert message in str(ei.value)


def test_canonical_form_parses_back():
    for spec in ("verbose,cores", "map_cpu:1*2,3", "mask_cpu:0x3,0xC", "none", "quiet"):
        b = parse(spec)
        assert parse(str(b)) == b


def test_effective_without_task_affinity_binds_nothing():
    assert effective("cores", False, 2, 2, 1) is None
    assert effective(None, False, 2, 2, 1) is None


def test_effective_auto_binding_rule():
    """task/affinity, no type: cores when the step's CPUs are exactly tasks × cpus-per-task."""
    assert effective(None, True, 4, 2, 2) == "quiet,cores"
    assert effective(None, True, 5, 2, 2) is None
    assert effective("verbose", True, 5, 2, 2) == "verbose,none"
    assert effective("verbose", True, 2, 2, 1) == "verbose,cores"
    assert effective("map_cpu:3", True, 5, 2, 2) == "quiet,map_cpu:3"


def test_cores_give_each_task_its_share():
    b = parse("cores")
    assert task_cpus(b, [4, 5, 6, 7], 2, 2) == [[4, 5], [6, 7]]
    assert task_cpus(b, [0, 1], 2, 1) == [[0], [1]]
    # more tasks than CPUs: wrap around (the tasks share, as Slurm's cyclic masks do)
    assert task_cpus(b, [0, 1], 3, 1) == [[0], [1], [0]]
    assert task_cpus(parse("threads"), [2, 3], 1, 2) == [[2, 3]]


def test_shares_are_disjoint_when_cpus_suffice():
    b = parse("cores")
    per = task_cpus(b, list(range(16)), 5, 3)
    flat = [c for t in per for c in t]
    assert len(flat) == len(set(flat)) == 15 and all(len(t) == 3 for t in per)


def test_map_and_mask_cycle_over_the_list():
    assert task_cpus(parse("map_cpu:3,1"), [0, 1, 2, 3], 3, 1) == [[3], [1], [3]]
    assert task_cpus(parse("mask_cpu:0x3,0xC"), [0, 1, 2, 3], 2, 1) == [[0, 1], [2, 3]]


def test_none_and_no_type_do_not_bind():
    assert task_cpus(parse("none"), [0, 1], 2, 1) is None
    assert task_cpus(CpuBind(), [0, 1], 2, 1) is None


def test_topology_levels_bind_to_all_the_cpus():
    assert task_cpus(parse("sockets"), [2, 0, 1], 2, 1) == [[0, 1, 2], [0, 1, 2]]


def test_env_variables():
    b = parse("verbose,cores")
    assert env(b, [[0], [1, 2, 3]]) == {
        "SLURM_CPU_BIND_VERBOSE": "verbose", "SLURM_CPU_BIND_TYPE": "mask_cpu:",
        "SLURM_CPU_BIND_LIST": "0x1,0xE", "SLURM_CPU_BIND": "verbose,mask_cpu:0x1,0xE"}
    assert env(parse("map_cpu:4,5"), [[4], [5]])["SLURM_CPU_BIND"] == "quiet,map_cpu:4,5"
    assert env(parse("none"), None)["SLURM_CPU_BIND"] == "quiet,none"


def test_verbose_line_has_slurms_shape():
    b = parse("verbose,cores")
    assert verbose_line(b, "node1", 1, 1, 4242, [1]) == \
        "cpu-bind=MASK - node1, task  1  1 [4242]: mask 0x2 set\n"
    assert verbose_line(parse("v,map_cpu:5"), "n", 12, 0, 7, [5]) == \
        "cpu-bind=MAP  - n, task 12  0 [7]: mask 0x20 set\n"
    assert verbose_line(parse("v,none"), "n", 0, 0, 7, [0, 1]) == \
        "cpu-bind=NONE - n, task  0  0 [7]: mask 0x3\n"


def test_srun_cpu_bind_help_and_env_input(capsys, monkeypatch):
    """srun --cpu-bind=help prints the types and exits 0; SLURM_CPU_BIND is read (and
    checked) when the option is absent."""
    from muster.cli import srun
    from muster.cli.getopt import CliExit
    with pytest.raises(CliExit) as ei:
        srun.parse(["--cpu-bind=help", "true"], {}, "/tmp")
    assert ei.value.code == 0 and "map_cpu:ID" in capsys.readouterr().out
    with pytest.raises(CliExit) as ei:
        srun.parse(["true"], {"SLURM_CPU_BIND": "mask_cpu:"}, "/tmp")
    assert ei.value.lines == ['srun: error: missing list for "--cpu-bind=mask_cpu:<list>"']
    inv = srun.parse(["-n2", "true"], {}, "/tmp")
    monkeypatch.setenv("SLURM_CPU_BIND", "verbose,cores")
    assert srun._step_request(inv, {}, False)["cpu_bind"] == "verbose,cores"
