"""squeue --json's pre-encoded records (muster.controller.jobjson) and the pieces that carry
them to the output unchanged: fmt_json's list layout, litejson.loads_head, wire.recv_frame.

The cached bytes must be exactly what squeue printed when it built each record itself
(fmt_json.job_json of the ``jobs`` reply's record, encoded by the standard library's compact
encoder), whatever the strings hold; the reply's head must decode the same whether or not
it fits the first prefix read."""

from __future__ import annotations

import socket
import threading

import msgspec
import pytest

from muster.common import fmt_json, litejson, wire
from muster.controller.jobjson import RecordCache, encode_record
from muster.model.alloc import NodeAlloc
from muster.model.job import Job

ODD = 'quote " backslash \\ tab \t nl \n cr \r ctl \x01\x1f del \x7f é 名前 \u2028 😀 </x>'


def jobs() -> list[Job]:
    """Jobs in every shape squeue --json shows, with strings that need escaping."""
    running = Job(job_id=2, state="RUNNING", name=ODD, user="u", partition="gpu",
                  alloc=(NodeAlloc("n1", 4, 1000, (0, 1)), NodeAlloc("n2", 4, 1000, (3,))),
                  node_list="n[1-2]", batch_host="n1", tres_alloc="cpu=8,mem=2000M,node=2",
                  num_cpus=8, num_nodes=2, start_time=1_800_000_100, time_limit=None,
                  gpus=3, mem_per_gpu=500, exclusive=True, comment=ODD, work_dir="/tmp/é")
    return [
        Job(job_id=1, hold="user", priority=0, reason="JobHeldUser", submit_time=1_800_000_000,
            time_limit=60, name="musterbench", std_out="/tmp/slurm-1.out"),
        running,
        Job(job_id=3, array_job_id=3, pending_tasks=[1, 2, 3, 7, 9], array_max_tasks=2,
            reason="Priority", priority=4_294_967_295, expected_start=1_800_000_500,
            dependency="afterok:2", reason_desc="a\"b"),
        Job(job_id=4, state="CANCELLED", completing=True, exit_signal=9, end_time=1_800_000_200,
            alloc=(NodeAlloc("n3", 1, 10),), node_list="n3", system_comment=ODD),
        Job(job_id=5, state="FAILED", exit_code=3, derived_exit_code=3, num_cpus=123_456_789,
            mem_per_cpu=100, wckey="w", contiguous=True, min_cpus_node=4),
        Job(job_id=6, array_job_id=3, array_task_id=0, state="RUNNING", alloc=(NodeAlloc("n4", 1, 1),)),
        Job(job_id=7, num_cpus=10 ** 17),  # billable_tres: a float the encoders spell apart
    ]


def printed(job: Job) -> bytes:
    """What squeue --json printed for the job before: the ``jobs`` reply's record (a round
    trip through the wire), converted and encoded by the command."""
    rec = msgspec.json.decode(msgspec.json.encode(job.to_record()))
    if rec["completing"]:
        rec["state"] = "COMPLETING"
    return litejson.dumps(fmt_json.job_json(rec, 0)).encode("utf-8")


@pytest.mark.parametrize("job", jobs(), ids=lambda j: str(j.job_id))
def test_cached_record_is_byte_for_byte_what_squeue_printed(job):
    assert encode_record(job) == printed(job)


def test_listing_is_the_list_squeue_writes():
    js = jobs()
    cache = RecordCache()
    raw = bytes(cache.listing(js))
    assert raw.decode() == fmt_json.list_text([printed(j).decode() for j in js])
    doc = {"jobs": fmt_json.Encoded(raw.decode()), "x": 1}
    built = {"jobs": [msgspec.json.decode(printed(j)) for j in js], "x": 1}
    assert fmt_json.dumps(doc) == fmt_json.dumps(built)  # the layout write() gives a list
    assert bytes(cache.listing([])) == b"[]" and fmt_json.list_text([]) == "[]"
    assert fmt_json.list_items(raw.decode()) == [printed(j).decode() for j in js]
    assert fmt_json.list_items("[]") == []


def test_cache_entries_follow_the_job_object_and_drop():
    a, b = jobs()[:2]
    cache = RecordCache()
    cache.listing([a, b])
    first = cache.record(a)
    assert cache.record(a) is first  # a hit: not built again
    a.priority = 77  # (the controller's save() drops it; here by hand)
    cache.drop(a.job_id)
    assert b'"priority":{"set":true,"infinite":false,"number":77}' in cache.record(a)
    reloaded = Job.from_store(a.to_store())  # same id, another object: rebuilt
    reloaded.name = "other"
    assert b'"name":"other"' in cache.record(reloaded)
    assert len(cache) == 2


def test_the_last_listing_is_reused_only_while_nothing_changed():
    js = jobs()
    cache = RecordCache()
    first = cache.listing(js)
    assert cache.listing(list(js)) is first  # the same job objects, in order: not laid out again
    assert cache.listing(js[::-1]) is not first  # another order (or selection): laid out
    again = cache.listing(js)
    assert again is not first and bytes(again) == bytes(first)
    js[0].priority = 77
    cache.drop(js[0].job_id)  # a change (save() drops it): rebuilt, the listing with it
    changed = cache.listing(js)
    assert b'"number":77' in bytes(changed) and b'"number":77' not in bytes(again)
    reloaded = Job.from_store(js[1].to_store())  # same id, another object
    reloaded.name = "other"
    swapped = cache.listing([js[0], reloaded, *js[2:]])
    assert b'"name":"other"' in bytes(swapped) and b'"name":"other"' not in bytes(changed)
    cache.drop(12345)  # a job never listed: the listing stands
    assert cache.listing([js[0], reloaded, *js[2:]]) is swapped


@pytest.mark.parametrize("head", [{}, {"ok": True, "now": 5, "cluster": "c é"}])
@pytest.mark.parametrize("size", [10, 1 << 17])
def test_a_large_raw_member_is_written_apart_and_frames_the_same(head, size):
    """netio.Link.frames: the pieces, joined, are the frame encode() makes (on a plain link
    a large raw last member is written from its own buffer, not copied into the frame)."""
    from muster.common.netio import Link
    link = Link(None, None)  # type: ignore[arg-type]  # framing only: no stream is touched
    records = b"[" + b",".join([b'{"a":"x"}'] * (size // 10)) + b"]"
    obj = {**head, "records": msgspec.Raw(records)}
    pieces = link.frames(obj)
    assert b"".join(bytes(p) for p in pieces) == bytes(link.encode(obj))
    assert len(pieces) == (3 if size > 1 << 16 else 1)
    body = b"".join(bytes(p) for p in pieces)[wire.HEADER_SIZE:]
    assert msgspec.json.decode(body) == {**head, "records": msgspec.json.decode(records)}


# ---- the reply's head, decoded; its tail, left as bytes ----------------------------------

def reply(head: dict, records: bytes) -> bytes:
    return msgspec.json.encode({**head, "records": msgspec.Raw(records)})


@pytest.mark.parametrize("rows", [0, 3, 5000])  # the head fits the first prefix, or not
def test_loads_head_decodes_the_head_and_leaves_the_tail(rows):
    head = {"ok": True, "now": 1_800_000_000, "fields": ["name", "state"],
            "rows": [[ODD + str(i), "PENDING"] for i in range(rows)]}
    tail = bytes(RecordCache().listing(jobs()))
    got, raw = litejson.loads_head(bytearray(reply(head, tail)), "records")
    assert got == head and bytes(raw) == tail
    spaced = b' { "ok" : true ,\n "records" : [ ] } \n'
    got, raw = litejson.loads_head(spaced, "records")
    assert got == {"ok": True} and bytes(raw) == b"[ ]"


def test_loads_head_without_the_member_or_malformed():
    err = {"ok": False, "code": "invalid_job_id", "error": ODD * 1000}
    assert litejson.loads_head(msgspec.json.encode(err), "records") == (err, None)
    for bad in (b'{"ok":tru', b'{"ok":true,"rows":[[1,"a"],[2,', b"[1]", b'{"records":}',
                b'{"ok":true,"x":[1,2}'):
        with pytest.raises(ValueError):
            litejson.loads_head(bad, "records")
    with pytest.raises(ValueError):  # the accelerator's errors are ValueErrors here too
        litejson.loads('[["a",1],["b')


def test_recv_frame_hands_the_records_over_unread():
    tail = bytes(RecordCache().listing(jobs()))
    body = reply({"ok": True, "now": 5}, tail)
    a, b = socket.socketpair()
    try:
        t = threading.Thread(target=a.sendall, args=(len(body).to_bytes(wire.HEADER_SIZE, "big") + body,))
        t.start()
        got = wire.recv_frame(b, raw="records")
        t.join()
    finally:
        a.close()
        b.close()
    assert isinstance(got["records"], memoryview) and bytes(got["records"]) == tail
    assert (got["ok"], got["now"]) == (True, 5)


def test_malformed_is_a_value_error_without_json_imported():
    """The CLI never imports ``json``; the accelerator's errors then surface as SystemError,
    which litejson must still report as malformed (a garbled reply is a FrameError)."""
    import subprocess
    import sys
    code = ("import sys\nfrom muster.common import litejson\nassert 'json' not in sys.modules\n"
            "for bad in ('[[\"a\",1],[\"b', '{\"a\":[1,2'):\n"
            "    try:\n        litejson.loads(bad)\n    except ValueError:\n        pass\n"
            "    else:\n        raise SystemExit(1)\n"
            "for bad in (b'{\"ok\":true,\"rows\":[[1,\"a\"],[2,', b'{\"ok\":true,\"x\":[1,2}'):\n"
            "    try:\n        litejson.loads_head(bad, 'records')\n    except ValueError:\n        pass\n"
            "    else:\n        raise SystemExit(2)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
