"""Requests naming many jobs are applied in slices (controller.bulk, issue 17): the first
slice with the request's checks, the rest in commits of their own with the event loop free
between them. Other requests are answered meanwhile, a job changed between slices is judged
again, a refusal still changes nothing, and a retry gets the first reply."""

from __future__ import annotations

import asyncio

from muster.common.requestid import new_rid
from muster.controller import bulk

N = 3 * bulk.SLICE + 10  # four slices


def _held(ip, n: int = N) -> list[int]:
    ids = [ip.submit(hold=True) for _ in range(n)]
    assert all(ip.ctl.state.jobs[j].hold for j in ids)
    return ids


def _refs(ids: list[int]) -> list[dict]:
    return [{"job_id": j} for j in ids]


def _still_held(ip, ids: list[int]) -> int:
    return sum(1 for j in ids if ip.ctl.state.jobs[j].hold)


def test_a_few_jobs_are_one_commit_answered_at_once(ip):
    ids = _held(ip, bulk.SLICE)
    reply = ip.request("release", jobs=_refs(ids))
    assert reply == {"ok": True}
    assert _still_held(ip, ids) == 0


def test_without_a_loop_the_slices_commit_back_to_back(ip):
    ids = _held(ip)
    assert ip.request("release", jobs=_refs(ids)) == {"ok": True}
    assert _still_held(ip, ids) == 0


def test_other_requests_are_answered_between_the_slices(ip):
    ids = _held(ip)

    async def main():
        pending = ip.request("release", jobs=_refs(ids))
        assert asyncio.iscoroutine(pending)
        # the first slice went with the request's checks, before anything else could run
        assert _still_held(ip, ids) == N - bulk.SLICE
        task = asyncio.create_task(pending)
        seen, answered = [], []
        while not task.done():
            await asyncio.sleep(0)
            seen.append(_still_held(ip, ids))
            got = ip.request("jobs", job_ids=[ids[-1]])  # a squeue meanwhile
            answered.append(got["ok"])
        return await task, seen, answered

    reply, seen, answered = asyncio.run(main())
    assert reply == {"ok": True}
    assert _still_held(ip, ids) == 0
    # one slice per turn of the loop, each answered request in between
    steps = sorted(set(seen), reverse=True)
    assert steps[:4] == [N - bulk.SLICE, N - 2 * bulk.SLICE, N - 3 * bulk.SLICE, 0], steps
    assert answered and all(answered)


def test_a_job_changed_between_slices_is_judged_again(ip):
    ids = _held(ip)
    late_cancelled, late_admin_held = ids[-1], ids[-2]

    async def main():
        pending = ip.request("release", jobs=_refs(ids))
        task = asyncio.create_task(pending)
        await asyncio.sleep(0)
        # meanwhile: the owner cancels one job, an operator holds another (admin hold: its
        # owner may no longer release it)
        assert ip.request("cancel", jobs=_refs([late_cancelled]))["ok"]
        assert ip.request("hold", uid=0, jobs=_refs([late_admin_held]))["ok"]
        return await task

    assert asyncio.run(main()) == {"ok": True}
    jobs = ip.ctl.state.jobs
    assert jobs[late_cancelled].state == "CANCELLED"
    assert jobs[late_admin_held].hold == "admin"
    assert _still_held(ip, ids[:-2]) == 0


def test_a_refusal_changes_nothing_however_many_jobs(ip):
    ids = _held(ip)
    other = ip.submit(uid=0, hold=True)  # root's job: the user may not release it
    reply = ip.request("release", jobs=_refs(ids + [other]))
    assert not reply["ok"] and reply["code"] == "access_denied", reply
    assert _still_held(ip, ids) == N


def test_a_sliced_cancel_reports_every_job_and_its_retry_gets_the_first_reply(ip):
    ids = _held(ip)
    rid = new_rid()

    async def cancel():
        return await ip.request("cancel", jobs=_refs(ids), rid=rid)

    first = asyncio.run(cancel())
    assert first["ok"] and first["errors"] == []
    assert sorted(int(j) for j in first["done"]) == ids
    assert all(ip.ctl.state.jobs[j].state == "CANCELLED" for j in ids)
    again = ip.request("cancel", jobs=_refs(ids), rid=rid)  # remembered: not run again
    assert again == first
