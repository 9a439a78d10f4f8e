"""Pure parts of the placement options: --constraint (parser, matcher, placement), CPUs and
memory per GPU, priority/basic and nice, --deadline, --gpu-bind, mail types and subjects."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from core_builders import job, node, partition, snapshot

from muster.common.mailtypes import MailTypeError, check_mail_user, parse_mail_type
from muster.core import SchedConfig, fits_ever, place, schedule
from muster.core import priority as prio
from muster.core.features import Alternative, ConstraintError, parse, satisfies, unknown_names
from muster.core.steplayout import AllocNode, StepError, StepRequest, layout, parse_gpu_bind

BACKFILL = SchedConfig(backfill=True)


def feat(name: str, *features: str, **kw):
    return replace(node(name, **kw), features=frozenset(features))


# ---- the expression parser -------------------------------------------------------------------

def test_parse_per_node_expressions_left_to_right():
    assert parse("a").alternatives == (Alternative(("f", "a")),)
    assert parse("a&b").alternatives[0].pred == ("&", ("f", "a"), ("f", "b"))
    # no precedence, as Slurm evaluates its list: a|b&c = (a|b)&c
    assert parse("a|b&c").alternatives[0].pred == ("&", ("|", ("f", "a"), ("f", "b")), ("f", "c"))
    assert parse("a|(b&c)").alternatives[0].pred == ("|", ("f", "a"), ("&", ("f", "b"), ("f", "c")))
    assert parse(" h100 ").text == "h100" and parse("h100").simple


def test_parse_matching_or_counts_and_grouping():
    c = parse("[a|b]&big")
    assert [a.pred for a in c.alternatives] == [("&", ("f", "big"), ("f", "a")),
                                                ("&", ("f", "big"), ("f", "b"))]
    assert not c.simple
    c = parse("[rack1*2&rack2*4]")
    assert c.alternatives == (Alternative(None, ((("f", "rack1"), 2), (("f", "rack2"), 4))),)
    assert c.alternatives[0].min_nodes == 6
    c = parse("(a&b)*2&c")
    assert c.alternatives == (Alternative(("f", "c"), ((("&", ("f", "a"), ("f", "b")), 2),)),)
    assert parse("[a&b]").alternatives[0].pred == ("&", ("f", "a"), ("f", "b"))
    assert c.names() == {"a", "b", "c"}
    assert unknown_names(parse("a|zz"), ["a", "b"]) == ["zz"]


@pytest.mark.parametrize("bad", [
    "", "   ", "a&", "&a", "a||b", "(a", "a)", "[a|b", "[[a|b]]", "([a|b])", "[a|b]|c",
    "a*0", "a*x", "a*2|b", "(a*2&b)", "[a|b&c]", "[a*2|b]", "[a|b]*2", "[a]&[b]", "a b",
    "a,b", "a!", "x" * 2000, "a\nb", "a;rm",
])
def test_parse_refuses_malformed_expressions(bad):
    with pytest.raises(ConstraintError):
        parse(bad)


def test_satisfies():
    p = parse("(a|b)&c").alternatives[0].pred
    assert satisfies(p, frozenset({"a", "c"})) and satisfies(p, frozenset({"b", "c", "x"}))
    assert not satisfies(p, frozenset({"a"})) and not satisfies(p, frozenset({"c"}))
    assert satisfies(None, frozenset())


# ---- placement --------------------------------------------------------------------------------

MIXED = (feat("a1", "a100", "ib"), feat("a2", "a100"), feat("h1", "h100", "ib"),
         feat("h2", "h100"), feat("c1"))


def names(alloc):
    return set(alloc.node_names)


@pytest.mark.parametrize("expr,want", [
    ("h100", {"h1", "h2"}), ("a100|h100", {"a1", "a2", "h1", "h2"}), ("ib", {"a1", "h1"}),
    ("a100&ib", {"a1"}), ("(a100|h100)&ib", {"a1", "h1"}),
])
def test_per_node_constraint_only_uses_matching_nodes(expr, want):
    got = place(job(1, nodes_min=len(want), mem_per_cpu=1, constraint=parse(expr)), MIXED,
                SchedConfig())
    assert got is not None and names(got) == want
    assert place(job(1, nodes_min=len(want) + 1, mem_per_cpu=1, constraint=parse(expr)), MIXED,
                 SchedConfig()) is None


def test_matching_or_takes_one_kind_for_all_nodes():
    c = parse("[a100|h100]")
    got = place(job(1, nodes_min=2, mem_per_cpu=1, constraint=c), MIXED, SchedConfig())
    assert names(got) in ({"a1", "a2"}, {"h1", "h2"})
    # three nodes of one kind do not exist: a|b without brackets could mix, [a|b] cannot
    assert place(job(1, nodes_min=3, mem_per_cpu=1, constraint=c), MIXED, SchedConfig()) is None
    assert place(job(1, nodes_min=3, mem_per_cpu=1, constraint=parse("a100|h100")), MIXED,
                 SchedConfig()) is not None
    # the first alternative that fits: a100 is busy, h100 is taken
    busy = tuple(replace(n, cpus_free=0) if n.name.startswith("a") else n for n in MIXED)
    got = place(job(1, nodes_min=2, mem_per_cpu=1, constraint=c), busy, SchedConfig())
    assert names(got) == {"h1", "h2"}


def test_counts_take_at_least_that_many_matching_nodes():
    got = place(job(1, nodes_min=3, mem_per_cpu=1, constraint=parse("ib*2")), MIXED,
                SchedConfig())
    assert len(got.nodes) == 3 and {"a1", "h1"} <= names(got)
    # counts raise the node count to their sum, and take disjoint nodes
    got = place(job(1, mem_per_cpu=1, constraint=parse("[a100*2&h100*1]")), MIXED, SchedConfig())
    assert len(got.nodes) == 3
    assert len(names(got) & {"a1", "a2"}) == 2 and len(names(got) & {"h1", "h2"}) == 1
    assert place(job(1, mem_per_cpu=1, constraint=parse("ib*3")), MIXED, SchedConfig()) is None
    assert place(job(1, nodes_max=2, mem_per_cpu=1, constraint=parse("[a100*2&h100*1]")), MIXED,
                 SchedConfig()) is None
    # a count with a per-node condition: every node has ib, and both are a100 or h100 ones
    got = place(job(1, mem_per_cpu=1, constraint=parse("a100*1&ib")), MIXED, SchedConfig())
    assert names(got) == {"a1"}


def test_fits_ever_and_schedule_honour_constraints():
    assert fits_ever(job(1, constraint=parse("nosuch")), MIXED, SchedConfig()) is not None
    jobs = [job(1, mem_per_cpu=1, cpus_per_task=16, constraint=parse("h100")),
            job(2, mem_per_cpu=1, cpus_per_task=16, constraint=parse("h100")),
            job(3, mem_per_cpu=1, cpus_per_task=16, constraint=parse("h100"))]
    for cfg in (SchedConfig(), BACKFILL):
        plan = schedule(snapshot(MIXED, jobs), cfg)
        started = {s.job_id: s.allocation.node_names for s in plan.starts}
        assert set(started) == {1, 2} and {started[1][0], started[2][0]} == {"h1", "h2"}
        assert plan.reasons[3] == "Resources"
    # backfill plans a counted constraint with the general search and still starts it
    plan = schedule(snapshot(MIXED, [job(4, mem_per_cpu=1, time_limit=5,
                                         constraint=parse("[a100*1&h100*1]"))]), BACKFILL)
    got = plan.starts[0].allocation.node_names
    assert len(got) == 2 and got[0].startswith("a") and got[1].startswith("h")


def test_cpus_per_gpu_scales_cpus_with_gpus():
    g = (node("g1", gpus=8, cpus=32),)
    a = place(job(1, gpus_per_node=2, cpus_per_gpu=4, mem_per_cpu=1), g, SchedConfig())
    assert (a.nodes[0].cpus, len(a.nodes[0].gpus)) == (8, 2)
    # max, not sum: 3 tasks × 4 CPUs is more than 2 GPUs × 4
    a = place(job(1, ntasks_per_node=3, cpus_per_task=4, gpus_per_node=2, cpus_per_gpu=4,
                  mem_per_cpu=1), g, SchedConfig())
    assert a.nodes[0].cpus == 12
    # per task: each task needs max(cpus_per_task, gpus_per_task × cpus_per_gpu)
    a = place(job(1, ntasks=2, gpus_per_task=2, cpus_per_gpu=3, mem_per_cpu=1), g, SchedConfig())
    assert (a.nodes[0].cpus, len(a.nodes[0].gpus)) == (12, 4)
    # --gpus spread: as many GPUs as the node's CPUs allow
    a = place(job(1, gpus_total=8, cpus_per_gpu=8, mem_per_cpu=1),
              (node("g1", gpus=8, cpus=32), node("g2", gpus=8, cpus=32)), SchedConfig())
    assert sorted((n.cpus, len(n.gpus)) for n in a.nodes) == [(32, 4), (32, 4)]
    assert place(job(1, gpus_per_node=8, cpus_per_gpu=8, mem_per_cpu=1), g, SchedConfig()) is None
    # and the schedule's fast paths agree (main and backfill)
    for cfg in (SchedConfig(), BACKFILL):
        plan = schedule(snapshot(g, [job(2, gpus_per_node=2, cpus_per_gpu=4, mem_per_cpu=1,
                                         time_limit=5)]), cfg)
        assert plan.starts[0].allocation.nodes[0].cpus == 8


def test_mem_per_gpu_follows_the_gpus_of_each_node():
    two = (node("g1", gpus=4, cpus=32), node("g2", gpus=4, cpus=32, gpus_used=(0, 1)))
    a = place(job(1, gpus_total=6, mem_per_gpu=1000), two, SchedConfig())
    assert sorted((len(n.gpus), n.mem) for n in a.nodes) == [(2, 2000), (4, 4000)]
    cfg = SchedConfig(def_mem_per_gpu=500, def_mem_per_cpu=7)
    assert place(job(1, gpus_per_node=2), two, cfg).nodes[0].mem == 1000


# ---- priority ---------------------------------------------------------------------------------

def test_basic_priority_counts_down_by_submission_minus_nice():
    assert prio.basic(job(1)) == 0xFFFF0000 - 1 == 4294901759
    assert prio.basic(job(2)) == 4294901758
    assert prio.basic(job(2, nice=100)) == 4294901658
    assert prio.basic(job(2, nice=-100)) == 4294901858
    assert prio.basic(job(2, nice=2**32)) == 1
    assert prio.basic(job(2, priority=7, fixed_priority=True)) == 7


def test_nice_lowers_priority_under_basic_and_multifactor():
    ns = (node("n1", cpus=1),)
    jobs = [job(10, nice=100, mem_per_cpu=1, submit_time=1),
            job(11, mem_per_cpu=1, submit_time=2)]
    plan = schedule(snapshot(ns, jobs), SchedConfig(priority_type="basic"))
    assert [s.job_id for s in plan.starts] == [11] and plan.reasons[10] == "Resources"
    assert plan.priorities == {10: 0xFFFF0000 - 10 - 100, 11: 0xFFFF0000 - 11}
    mf = SchedConfig(priority_type="multifactor")
    plan = schedule(snapshot(ns, jobs), replace(mf, weight_partition=1000))
    assert [s.job_id for s in plan.starts] == [11] and plan.priorities == {10: 900, 11: 1000}
    # multifactor without weights (Slurm 23.11's default): 0 - nice, at least 1: a positive
    # nice cannot go below 1, so the displayed priorities tie, and Muster's queue key breaks
    # the tie by nice (docs/design.md "Priority and nice"); a negative nice raises the job
    plan = schedule(snapshot(ns, jobs), mf)
    assert [s.job_id for s in plan.starts] == [11] and plan.priorities == {}
    boosted = [job(12, mem_per_cpu=1, submit_time=1), job(13, nice=-50, mem_per_cpu=1,
                                                         submit_time=2)]
    plan = schedule(snapshot(ns, boosted), mf)
    assert [s.job_id for s in plan.starts] == [13] and plan.priorities == {13: 50}


# ---- deadline ---------------------------------------------------------------------------------

def test_deadline_missed_or_cuts_the_limit():
    ns = (node("n1", cpus=1),)
    now = 1000
    late = job(1, mem_per_cpu=1, time_limit=10, deadline=now + 599)
    ok = job(2, mem_per_cpu=1, time_limit=10, deadline=now + 300, time_min=5)
    unlimited = job(3, mem_per_cpu=1, deadline=now + 3600, partitions=("q",))
    parts = (partition("p", ns), partition("q", (node("m1", cpus=1),)))
    snap = replace(snapshot(ns, [late, ok], now=now), partitions=parts,
                   nodes=ns + (node("m1", cpus=1, partitions=("q",)),),
                   pending=(late, ok, unlimited))
    plan = schedule(snap, SchedConfig())
    assert plan.reasons[1] == "DeadLine"
    limits = {s.job_id: s.time_limit for s in plan.starts}
    assert limits == {2: 5, 3: 60}


# ---- --gpu-bind -------------------------------------------------------------------------------

def _step(bind, ntasks=4, gpus=(2, 3, 5, 6), **kw):
    lay = layout([AllocNode("n1", 8, gpus)], {}, {},
                 StepRequest(ntasks=ntasks, gpu_bind=bind, **kw))
    return lay.nodes[0].task_gpus


def test_gpu_bind_maps_tasks_to_the_steps_gpus():
    assert _step(None) is None and _step("none") is None and _step("closest") is None
    assert _step("single:1") == ((2,), (3,), (5,), (6,))
    assert _step("single:2") == ((2,), (2,), (3,), (3,))
    assert _step("single:1", ntasks=6) == ((2,), (3,), (5,), (6,), (2,), (3,))
    assert _step("verbose,map_gpu:3,0") == ((6,), (2,), (6,), (2,))
    assert _step("map_gpu:1*3,0") == ((3,), (3,), (3,), (2,))
    assert _step("mask_gpu:0x3,0xc") == ((2, 3), (5, 6), (2, 3), (5, 6))
    assert _step("per_task:1") == ((2,), (3,), (5,), (6,))
    assert _step("per_task:2", ntasks=2) == ((2, 3), (5, 6))
    # an explicit binding replaces the implicit per-task one of --gpus-per-task
    assert _step("single:2", ntasks=2, gpus_per_task=1) == ((2,), (2,))


@pytest.mark.parametrize("bad", ["map_gpu:", "map_gpu:x", "single:0", "per_task:-1",
                                 "mask_gpu:0", "mask_gpu:zz", "bogus", "closest:1", "map_gpu:1*0"])
def test_gpu_bind_refuses_bad_specs(bad):
    with pytest.raises(StepError) as ei:
        parse_gpu_bind(bad)
    assert ei.value.code == "never"


def test_gpu_bind_refuses_gpus_outside_the_step():
    for bad in ("map_gpu:4", "mask_gpu:0x10", "per_task:2"):
        with pytest.raises(StepError):
            _step(bad)


# ---- mail -------------------------------------------------------------------------------------

def test_mail_types_and_users():
    assert parse_mail_type("end,begin") == "BEGIN,END"
    assert parse_mail_type("ALL") == "INVALID_DEPEND,BEGIN,END,FAIL,REQUEUE,STAGE_OUT"
    assert parse_mail_type("ALL,NONE") is None
    assert parse_mail_type("time_limit_80,ARRAY_TASKS") == "TIME_LIMIT_80,ARRAY_TASKS"
    assert check_mail_user(" bob@example.org ") == "bob@example.org"
    for bad_type in ("BOGUS", "BEGIN,,END", ""):
        with pytest.raises(MailTypeError):
            parse_mail_type(bad_type)
    for bad_user in ("-q/etc/shadow", "a b", "bob\nBcc: x", "", "x" * 300, "a;b"):
        with pytest.raises(MailTypeError):
            check_mail_user(bad_user)


def test_mail_subjects_are_slurms():
    from muster.controller.mail import subject
    j = SimpleNamespace(job_id=12, name="train\nBcc: evil", submit_time=100, start_time=103,
                        end_time=703, state="COMPLETED", exit_code=0, exit_signal=0,
                        array_task_id=None, array_job_id=None)
    assert subject(j, "BEGIN", 0) == \
        "Slurm Job_id=12 Name=train?Bcc: evil Began, Queued time 00:00:03"
    j.name = "train"
    assert subject(j, "END", 0) == \
        "Slurm Job_id=12 Name=train Ended, Run time 00:10:00, COMPLETED, ExitCode 0"
    j.state, j.exit_code = "FAILED", 3
    assert subject(j, "FAIL", 0) == \
        "Slurm Job_id=12 Name=train Failed, Run time 00:10:00, FAILED, ExitCode 3"
    assert subject(j, "TIME_LIMIT_80", 583) == \
        "Slurm Job_id=12 Name=train Reached 80% of time limit, Run time 00:08:00"
    j.array_job_id, j.array_task_id = 7, 3
    assert subject(j, "REQUEUE", 0) == \
        "Slurm Array Task Job_id=7_3 (12) Name=train Requeued, Run time 00:10:00"
    assert subject(j, "END", 0, ("Mixed", 0, 3)) == \
        "Slurm Array Summary Job_id=7_* (7) Name=train Ended, Mixed, ExitCode [0-3]"


def test_overcommit_step_balances_tasks_beyond_the_cpus():
    alloc = [AllocNode("n1", 2, ()), AllocNode("n2", 1, ())]
    with pytest.raises(StepError) as exc:  # 5 tasks on 3 CPUs: refused without -O
        layout(alloc, {}, {}, StepRequest(ntasks=5))
    assert exc.value.message == "More processors requested than permitted"
    lay = layout(alloc, {}, {}, StepRequest(ntasks=5, overcommit=True))
    assert lay.tasks_per_node == [3, 2]
    assert [ns.cpus for ns in lay.nodes] == [2, 1]  # never more than the job's CPUs there
    assert [ns.tasks for ns in lay.nodes] == [(0, 1, 2), (3, 4)]
    with pytest.raises(StepError) as exc:  # another step holds n2's CPU: wait, as any step
        layout(alloc, {"n2": 1}, {}, StepRequest(ntasks=5, overcommit=True))
    assert exc.value.code == "busy"
