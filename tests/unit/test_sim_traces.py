"""Trace readers: synthetic files and the first lines of the real traces."""

import os as _os  # noqa: E402
import sys as _sys  # noqa: E402
_sys.path.insert(0, _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))
from shared_path import SHARED  # noqa: E402
import gzip
import os

import pytest

from muster.sim.traces import TraceError, detect_format, read_trace

TRACES = str(SHARED / "traces")
need_traces = pytest.mark.skipif(not os.path.isdir(TRACES), reason="shared traces not present")

SWF = """; MaxProcs: 64
; MaxNodes: 32
; UnixStartTime: 100
    1   100  5   50   4  -1 -1   8   60 -1 1 7 1 -1 -1 -1 -1 -1
    2    90  0   10   2  -1 -1  -1   -1 -1 1 8 1 -1 -1 -1 -1 -1
    3   120  0   -1   2  -1 -1   2   60 -1 0 7 1 -1 -1 -1 -1 -1
    4   130  0   20  -1  -1 -1  -1   60 -1 1 7 1 -1 -1 -1 -1 -1
    5   140  0  100   4  -1 -1   4   60 -1 1 9 1 -1 -1 -1 -1 -1
"""


def _write(path, text, gz=False):
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return str(path)


@pytest.mark.parametrize("gz", [False, True])
def test_swf_fields_sorting_and_drops(tmp_path, gz):
    p = _write(tmp_path / ("t.swf.gz" if gz else "t.swf"), SWF, gz)
    tr = read_trace(p)
    assert tr.fmt == "swf" and tr.max_procs == 64 and tr.max_nodes == 32
    assert tr.dropped == {"no run time": 1, "no processors": 1}
    # sorted by submit (job 2 first), renumbered, time shifted to 0
    assert [j.orig_id for j in tr.jobs] == ["2", "1", "5"]
    assert [j.job_id for j in tr.jobs] == [1, 2, 3]
    j2, j1, j5 = tr.jobs
    assert (j2.submit, j2.run, j2.cpus, j2.limit, j2.user) == (0, 10, 2, 10, "8")  # limit -1 → run
    assert (j1.submit, j1.run, j1.cpus, j1.limit) == (10, 50, 8, 60)  # requested procs win
    assert j5.run == 100 and j5.limit == 60  # will be killed at its limit


def _swf_lines(submits):
    return "; MaxProcs: 8\n" + "".join(
        f"{i} {t} 0 10 1 -1 -1 1 60 -1 1 {i % 3} 1 -1 -1 -1 -1 -1\n"
        for i, t in enumerate(submits, 1))


def test_swf_head_read_stops_early_and_selects_what_a_whole_read_does(tmp_path):
    """read_trace(limit=n) of a file in submit order: the first n jobs of the whole read (ties
    at the boundary in file order), without reading the rest."""
    submits = [0, 5, 5, 5, 9, 12, 12, 20, 30, 31]
    p = _write(tmp_path / "sorted.swf", _swf_lines(submits) + "1 2 3\n")  # bad last line
    with pytest.raises(TraceError):
        read_trace(p)  # a whole read reaches the bad line
    whole = read_trace(_write(tmp_path / "ok.swf", _swf_lines(submits)))
    for n in (1, 3, 4, 7, 10):
        head = read_trace(p, limit=n)  # never reaches the bad line
        assert [(j.orig_id, j.submit) for j in head.jobs] == \
            [(j.orig_id, j.submit) for j in whole.jobs[:n]]
        assert head.read_limit == n and head.max_procs == 8
    with pytest.raises(TraceError):
        read_trace(p, limit=11)  # more jobs than the file has: it reads on to the bad line


def test_swf_head_read_of_a_file_out_of_order_reads_it_whole(tmp_path):
    """A file whose first jobs are not in submit order is read whole and sorted: the head is
    then the whole read's, whatever comes later in the file."""
    submits = [10, 3, 7, 1, 20, 2]
    p = _write(tmp_path / "unsorted.swf", _swf_lines(submits))
    head = read_trace(p, limit=2)
    assert head.read_limit is None  # read whole
    assert [j.orig_id for j in head.jobs[:2]] == ["4", "6"]  # submits 1 and 2, from the end


def test_swf_short_line_is_an_error(tmp_path):
    import gc
    p = _write(tmp_path / "bad.swf", "1 2 3\n")
    with pytest.raises(TraceError):
        read_trace(p)
    assert gc.isenabled()  # the reader pauses the collector; an error turns it back on too


def test_itp_and_philly(tmp_path):
    p = _write(tmp_path / "c.csv", "job_id,submission_time,duration,num_gpu\n"
               "a,50,100,8\nb,10,5,1\nc,20,-1,1\nd,30,7,0\n")
    tr = read_trace(p)
    assert tr.fmt == "itp" and [j.orig_id for j in tr.jobs] == ["b", "a"]
    assert (tr.jobs[1].submit, tr.jobs[1].gpus, tr.jobs[1].run) == (40, 8, 100)
    assert tr.dropped == {"no run time": 1, "no GPUs": 1}
    p = _write(tmp_path / "ph.csv", "job_id,user,num_gpu,submit_time,iterations,model_name,"
               "duration,interval\n0,u1,2,5,1,m,30,1\n1,u2,1,3,1,m,10,1\n")
    tr = read_trace(p)
    assert tr.fmt == "philly" and [j.user for j in tr.jobs] == ["u2", "u1"]


def test_openb_pods_and_nodes(tmp_path):
    pods = _write(tmp_path / "pods.csv",
                  "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                  "creation_time,deletion_time,scheduled_time\n"
                  "p0,1500,1024,1,460,,LS,Running,0,100,10\n"
                  "p1,8000,2048,2,1000,V100M16,BE,Running,5,50,5\n"
                  "p2,1000,512,1,1000,T4|P100,BE,Pending,7,,\n"
                  "p3,1000,512,1,1000,T4|P100,BE,Running,8,20,9\n")
    nodes = _write(tmp_path / "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
                   "n0,32000,262144,8,V100M16\nn1,16000,65536,0,\n")
    tr = read_trace(pods, nodes_file=nodes)
    assert tr.fmt == "openb" and tr.dropped == {"never scheduled in the trace": 1}
    p0, p1, p3 = tr.jobs
    assert (p0.cpus, p0.mem, p0.gpus, p0.run, p0.gpu_type) == (2, 1024, 1, 90, None)
    assert p1.gpu_type == "V100M16" and p3.gpu_type is None  # alternatives: no constraint
    assert [(n.cpus, n.gpus, n.gpu_type) for n in tr.nodes] == [(32, 8, "V100M16"), (16, 0, None)]


def test_unknown_format(tmp_path):
    p = _write(tmp_path / "x.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(TraceError):
        read_trace(p)


@need_traces
@pytest.mark.parametrize("name,fmt,first", [
    ("swf/CTC-SP2-1996-3.1-cln.swf.gz", "swf", ("1", 0, 937, 306, 35100)),
    ("swf/KTH-SP2-1996-2.1-cln.swf.gz", "swf", ("15", 0, 3477, 4, 53940)),
    ("swf/HPC2N-2002-2.2-cln.swf.gz", "swf", ("11", 0, 43306, 32, 43200)),
    ("swf/lublin_256.swf.gz", "swf", ("1", 0, 12072, 16, 12072)),
])
def test_real_swf_first_job(name, fmt, first):
    path = os.path.join(TRACES, name)
    assert detect_format(path) == fmt
    tr = read_trace(path)
    j = tr.jobs[0]
    assert (j.orig_id, j.submit, j.run, j.cpus, j.limit) == first


@need_traces
def test_real_gpu_traces_first_lines():
    tr = read_trace(os.path.join(TRACES, "gpu/microsoft-itp-2021/cluster10.csv.gz"))
    assert tr.fmt == "itp" and len(tr.jobs) == 260
    assert (tr.jobs[0].orig_id, tr.jobs[0].run, tr.jobs[0].gpus) == (
        "5dc7d9cd-c300-9a4f-c3cd-dc2cc0935548", 604, 16)
    tr = read_trace(os.path.join(TRACES, "gpu/alibaba-pai-2023/openb_pod_list_default.csv.gz"))
    assert tr.fmt == "openb" and len(tr.nodes) == 1523
    assert sum(n.gpus for n in tr.nodes) == 6212
    assert tr.jobs[0].orig_id == "openb-pod-0000" and tr.jobs[0].cpus == 12
