"""Placement of one job (cons_tres-like): shapes, memory, GPUs, node choice, "never"."""

from __future__ import annotations

from core_builders import CFG, job, node, nodes

from muster.core import (
    NEVER_BAD_CONFIG,
    NEVER_NODE_COUNT,
    NEVER_REQ_NODES,
    SchedConfig,
    fits_ever,
    place,
)


def test_default_job_takes_one_cpu_and_all_memory_without_config():
    a = place(job(1), nodes(2), CFG)
    assert a is not None and len(a.nodes) == 1
    na = a.nodes[0]
    assert (na.cpus, na.mem, na.gpus, na.tasks) == (1, 64000, (), 1)


def test_config_default_memory_per_cpu_scales_with_cpus():
    a = place(job(1, cpus_per_task=4), nodes(1), SchedConfig(def_mem_per_cpu=1000))
    assert (a.nodes[0].cpus, a.nodes[0].mem) == (4, 4000)


def test_memory_rules_in_order():
    n = nodes(1, gpus=4)
    assert place(job(1, mem_per_node=5000), n, CFG).nodes[0].mem == 5000
    assert place(job(1, mem_per_cpu=100, cpus_per_task=3), n, CFG).nodes[0].mem == 300
    assert place(job(1, mem_per_gpu=1000, gpus_per_node=2), n, CFG).nodes[0].mem == 2000
    cfg = SchedConfig(def_mem_per_gpu=7, def_mem_per_cpu=3, def_mem_per_node=11)
    assert place(job(1, gpus_per_node=2), n, cfg).nodes[0].mem == 14
    assert place(job(1, cpus_per_task=2), n, cfg).nodes[0].mem == 6
    assert place(job(1), n, SchedConfig(def_mem_per_node=11)).nodes[0].mem == 11


def test_mem_zero_means_all_memory_and_needs_untouched_memory():
    assert place(job(1, mem_per_node=0), nodes(1), CFG).nodes[0].mem == 64000
    assert place(job(1, mem_per_node=0), [node("n1", mem_used=1)], CFG) is None


def test_best_fit_prefers_least_free_node_then_weight():
    ns = [node("n1", cpus_used=0), node("n2", cpus_used=12), node("n3", cpus_used=15)]
    assert place(job(1, cpus_per_task=2, mem_per_cpu=1), ns, CFG).nodes[0].node == "n2"
    assert place(job(1, cpus_per_task=1, mem_per_cpu=1), ns, CFG).nodes[0].node == "n3"
    ns = [node("n1", cpus_used=15, weight=5), node("n2", weight=1)]
    assert place(job(1, mem_per_cpu=1), ns, CFG).nodes[0].node == "n2"


def test_cpu_jobs_avoid_nodes_with_free_gpus():
    ns = [node("g1", gpus=8, cpus=64), node("c1", cpus=64)]
    assert place(job(1, mem_per_cpu=1), ns, CFG).nodes[0].node == "c1"


def test_answer_does_not_depend_on_node_order():
    ns = [node(f"n{i}", cpus_used=i % 5, gpus=4, gpus_used=tuple(range(i % 3))) for i in range(1, 9)]
    j = job(1, ntasks=30, mem_per_cpu=10)
    assert place(j, ns, CFG) == place(j, list(reversed(ns)), CFG)


def test_ntasks_pack_on_fewest_nodes():
    a = place(job(1, ntasks=8, cpus_per_task=2, mem_per_cpu=1), nodes(3), CFG)
    assert [(x.tasks, x.cpus) for x in a.nodes] == [(8, 16)]
    a = place(job(1, ntasks=20, mem_per_cpu=1), nodes(3), CFG)
    assert sorted(x.tasks for x in a.nodes) == [4, 16]
    assert sum(x.cpus for x in a.nodes) == 20


def test_ntasks_respects_nodes_max_and_min():
    assert place(job(1, ntasks=20, nodes_max=1, mem_per_cpu=1), nodes(3), CFG) is None
    a = place(job(1, ntasks=4, nodes_min=2, mem_per_cpu=1), nodes(3), CFG)
    assert len(a.nodes) == 2 and sum(x.tasks for x in a.nodes) == 4


def test_ntasks_per_node_fixes_tasks_per_node():
    a = place(job(1, nodes_min=2, ntasks_per_node=4, mem_per_cpu=1), nodes(3), CFG)
    assert [x.tasks for x in a.nodes] == [4, 4]
    a = place(job(1, ntasks=6, ntasks_per_node=4, mem_per_cpu=1), nodes(3), CFG)
    assert sorted(x.tasks for x in a.nodes) == [2, 4]


def test_default_tasks_one_per_node():
    a = place(job(1, nodes_min=3, mem_per_cpu=1), nodes(4), CFG)
    assert [x.tasks for x in a.nodes] == [1, 1, 1]


def test_gpus_per_node_lowest_free_indices():
    ns = [node("n1", gpus=8, gpus_used=(0, 2))]
    a = place(job(1, gpus_per_node=3, mem_per_cpu=1), ns, CFG)
    assert a.nodes[0].gpus == (1, 3, 4)


def test_gpus_total_spread_fills_most_free_first():
    ns = [node("n1", gpus=8), node("n2", gpus=8, gpus_used=(0, 1)), node("n3", gpus=8)]
    a = place(job(1, gpus_total=12, mem_per_cpu=1), ns, CFG)
    got = {x.node: len(x.gpus) for x in a.nodes}
    # the biggest hole first, then the remainder on the best-fitting node (n2: 6 free)
    assert got == {"n1": 8, "n2": 4}
    assert [x.gpus for x in a.nodes] == [tuple(range(8)), (2, 3, 4, 5)]
    # fits one node: best fit (fewest free GPUs that still suffice)
    a = place(job(1, gpus_total=6, mem_per_cpu=1), ns, CFG)
    assert [x.node for x in a.nodes] == ["n2"]


def test_gpus_per_task():
    a = place(job(1, ntasks=4, gpus_per_task=2, mem_per_cpu=1), nodes(2, gpus=4), CFG)
    assert [(x.tasks, len(x.gpus)) for x in a.nodes] == [(2, 4), (2, 4)]


def test_gpu_type_must_match():
    ns = [node("n1", gpus=8, gpu_type="a100"), node("n2", gpus=8, gpu_type="h100")]
    a = place(job(1, gpus_per_node=1, gpu_type="h100", mem_per_cpu=1), ns, CFG)
    assert a.nodes[0].node == "n2"
    assert place(job(1, gpus_per_node=1, gpu_type="v100"), ns, CFG) is None


def test_exclusive_takes_whole_idle_node():
    ns = [node("n1", gpus=4, cpus_used=1), node("n2", gpus=4)]
    a = place(job(1, exclusive=True, mem_per_node=100), ns, CFG)
    assert a.nodes[0].node == "n2"
    assert (a.nodes[0].cpus, a.nodes[0].gpus, a.nodes[0].mem) == (16, (0, 1, 2, 3), 100)


def test_required_and_excluded_nodes():
    ns = nodes(4)
    a = place(job(1, nodes_min=2, req_nodes={"n0003"}, mem_per_cpu=1), ns, CFG)
    assert "n0003" in a.node_names and len(a.nodes) == 2
    a = place(job(1, exc_nodes={"n0000", "n0001"}, mem_per_cpu=1), ns, CFG)
    assert a.nodes[0].node == "n0002"
    assert place(job(1, req_nodes={"n0000"}), [node("n0000", cpus_used=16)], CFG) is None


def test_unusable_nodes_are_never_used():
    assert place(job(1), [node("n1", usable=False)], CFG) is None


def test_fits_ever_refuses_impossible_requests():
    n4 = nodes(4, gpus=8, cpus=16, mem=64000)
    assert fits_ever(job(1, gpus_per_node=9), n4, CFG) == NEVER_BAD_CONFIG
    assert fits_ever(job(1, gpus_total=33), n4, CFG) == NEVER_BAD_CONFIG
    assert fits_ever(job(1, gpus_total=32), n4, CFG) is None
    assert fits_ever(job(1, cpus_per_task=17), n4, CFG) == NEVER_BAD_CONFIG
    assert fits_ever(job(1, mem_per_node=102400), n4, CFG) == NEVER_BAD_CONFIG
    assert fits_ever(job(1, nodes_min=5), n4, CFG) == NEVER_NODE_COUNT
    assert fits_ever(job(1, req_nodes={"zz"}), n4, CFG) == NEVER_REQ_NODES


def test_fits_ever_ignores_current_use_and_state():
    busy = [node("n1", cpus_used=16, mem_used=64000, usable=False)]
    assert place(job(1), busy, CFG) is None
    assert fits_ever(job(1, cpus_per_task=16), busy, CFG) is None


def test_request_key_covers_every_field_the_normalisation_reads():
    """Changing any JobView field outside request_key leaves request_of unchanged, and every
    field inside it changes the key (the pooled scheduler memoises shapes by it)."""
    import dataclasses

    from muster.core.features import parse as parse_constraint
    from muster.core.placement import _normalise, request_key
    from muster.core.snapshot import JobView

    base = JobView(job_id=1, ntasks=4, cpus_per_task=2, mem_per_cpu=3, gpus_per_node=1,
                   gpu_type="a100", nodes_max=2, ntasks_per_node=2)
    cfg = dataclasses.replace(CFG, def_mem_per_cpu=7, def_mem_per_gpu=5)
    changed = {"job_id": 2, "priority": 9, "submit_time": 5, "partitions": ("x",), "nodes_min": 2,
               "nodes_max": 3, "ntasks": 6, "ntasks_per_node": 3, "cpus_per_task": 1,
               "mem_per_node": 0, "mem_per_cpu": 4, "mem_per_gpu": 6, "gpus_per_node": 2,
               "gpus_total": 3, "gpus_per_task": 1, "gpu_type": "h100",
               "req_nodes": frozenset({"n1"}), "exc_nodes": frozenset({"n2"}), "exclusive": True,
               "time_limit": 5, "blocked": "Dependency", "max_starts": 3, "user": "u",
               "group": "g", "account": "a", "qos": "q", "time_min": 2, "switches": 1,
               "switch_wait": 9, "constraint": parse_constraint("f"), "reservation": "r",
               "nice": 3, "eligible_time": 4, "fixed_priority": True, "requeue": False,
               "cpus_per_gpu": 4, "deadline": 99, "min_cpus": 3, "contiguous": True,
               "min_tmp": 100, "use_min_nodes": True}
    assert set(changed) == {f.name for f in dataclasses.fields(JobView)}
    for name, value in changed.items():
        other = dataclasses.replace(base, **{name: value})
        same_key = request_key(other) == request_key(base)
        if _normalise(other, cfg) != _normalise(base, cfg):
            assert not same_key, f"request_key misses {name}"
    # and the fields in the key all matter to some request
    for name in ("cpus_per_task", "nodes_min", "mem_per_cpu", "gpus_per_node", "exclusive"):
        other = dataclasses.replace(base, **{name: changed[name]})
        assert request_key(other) != request_key(base)
