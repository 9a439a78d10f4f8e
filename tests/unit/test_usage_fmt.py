"""Usage statistics as sacct/sstat/seff print them (muster.cli.fmt_usage, sstat, seff)."""

import pytest

from muster.cli import fmt_sacct, fmt_usage, seff, sstat
from muster.cli.getopt import CliExit
from muster.controller.usage import aggregate, clean

MB = 1 << 20


def stats(*tasks, node="node1"):
    """Aggregated statistics of one node's task records."""
    return aggregate({node: clean({"time": 1, "tasks": list(tasks)})})


def task(tid, rss_mb, cpu_ms, **kw):
    return {"task": tid, "user_ms": cpu_ms, "sys_ms": 0, "max_rss": rss_mb * MB,
            "max_vmem": 2 * rss_mb * MB, "pages": 3, "read": 4096, "write": 2012, **kw}


@pytest.mark.parametrize("num,kw,text", [
    (156688384, {}, "153016K"), (MB, {}, "1M"), (0, {}, "0"), (1536, {}, "1.50K"),
    (2012, {}, "2012"), (1 << 30, {}, "1G"), (156688384, {"noconvert": True}, "156688384"),
    (156688384, {"units": "M"}, "149.43M"), (1 << 30, {"units": "m"}, "1024M"),
    (76508.5 * 1024, {}, "76508.50K"),
])
def test_sizes_convert_like_slurm(num, kw, text):
    assert fmt_usage.convert_num(num, **kw) == text


@pytest.mark.parametrize("ms,text", [
    (2345, "00:02.345"), (0, "00:00:00"), (2000, "00:00:02"), (3723000, "01:02:03"),
    (90061000, "01-01:01:01"), (59999, "00:59.999"),
])
def test_cpu_times_are_slurms_elapsed_time(ms, text):
    assert fmt_usage.elapsed(ms) == text


def test_tres_lists_are_sorted_and_typed():
    u = stats(task(0, 150, 2100), task(1, 20, 900))
    assert fmt_usage.tres_list(u, "in", "max") == \
        "cpu=00:00:02,energy=0,fs/disk=4K,mem=150M,pages=3,vmem=300M"
    assert fmt_usage.tres_list(u, "in", "min") == \
        "cpu=00:00:00,energy=0,fs/disk=4K,mem=20M,pages=3,vmem=40M"
    assert fmt_usage.tres_list(u, "in", "max_task") == \
        "cpu=0,energy=0,fs/disk=0,mem=0,pages=0,vmem=0"
    assert fmt_usage.tres_list(u, "in", "min_node").startswith("cpu=node1,energy=node1")
    assert fmt_usage.tres_list(u, "out", "tot") == "energy=0,fs/disk=4024"
    assert fmt_usage.tres_list(u, "in", "tot", noconvert=True).endswith(
        f"mem={170 * MB},pages=6,vmem={340 * MB}")
    assert fmt_usage.tres_list(None, "in", "max") == ""


def test_gpu_figures_appear_only_where_measured():
    u = stats(task(0, 10, 10, gpumem=2 * MB, gpuutil=0, max_gpuutil=70))
    assert "gres/gpumem=2M,gres/gpuutil=70" in fmt_usage.tres_list(u, "in", "max")
    assert "gres/gpuutil=0" in fmt_usage.tres_list(u, "in", "tot")
    assert "gres" not in fmt_usage.tres_list(stats(task(0, 10, 10)), "in", "max")


def sacct_rows(fields, **kw):
    job = {"job_id": 7, "name": "j", "state": "COMPLETED", "steps": [
        {"step_id": "batch", "name": "batch", "state": "COMPLETED", "start_time": 1,
         "end_time": 5, "usage": stats(task(0, 150, 2345))},
        {"step_id": 0, "name": "py", "state": "COMPLETED", "start_time": 1, "end_time": 5,
         "usage": stats(task(0, 10, 1000), task(1, 30, 3000), node="node2")},
        {"step_id": 1, "name": "py", "state": "RUNNING", "start_time": 1, "end_time": None}]}
    out = fmt_sacct.render([job], fields=fields, parsable2=True, noheader=True, now=9, **kw)
    return [line.split("|") for line in out.splitlines()]


def test_sacct_step_rows_show_statistics_and_job_rows_only_cpu_totals():
    rows = sacct_rows("JobID,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,TotalCPU,UserCPU,"
                      "SystemCPU,MinCPU,MinCPUTask,AveCPU,MaxVMSize,MaxPages")
    assert rows[0] == ["7", "", "", "", "", "00:06.345", "00:06.345", "00:00:00", "", "", "",
                       "", ""]
    assert rows[1] == ["7.batch", "150M", "node1", "0", "150M", "00:02.345", "00:02.345",
                       "00:00:00", "00:00:02", "0", "00:00:02", "300M", "3"]
    assert rows[2][:5] == ["7.0", "30M", "node2", "1", "20M"]
    assert rows[2][8:11] == ["00:00:01", "0", "00:00:02"]
    assert rows[3][1:6] == ["", "", "", "", "00:00:00"]  # running: no statistics yet
    assert sacct_rows("JobID,MaxRSS", noconvert=True)[1] == ["7.batch", str(150 * MB)]
    assert sacct_rows("JobID,MaxRSS", units="G")[1] == ["7.batch", "0.15G"]


def test_sacct_knows_the_usage_field_names():
    names = {n.lower() for n in fmt_sacct.FIELDS}
    for n in ("MaxRSS", "MaxRSSNode", "MaxRSSTask", "AveRSS", "MaxVMSize", "MaxPages", "AveCPU",
              "MinCPU", "TotalCPU", "UserCPU", "SystemCPU", "CPUTimeRAW", "TRESUsageInMax",
              "TRESUsageInMaxNode", "TRESUsageOutTot", "TRESUsageInMinTask"):
        assert n.lower() in names
    assert fmt_sacct.FIELDS["TRESUsageInMaxNode"][0] == 18
    assert fmt_sacct.FIELDS["TRESUsageOutMax"][0] == 15


def test_sstat_fields_match_prefixes_in_slurms_order():
    got = [(n, w) for n, w, _ in sstat.parse_fields("jobid,maxrss,MaxRSSn%4,tresusageinmaxt,"
                                                       "avecpu%-12,ntasks")]
    assert got == [("JobID", -12), ("MaxRSS", 10), ("MaxRSSNode", 4),
                   ("TRESUsageInMaxTask", 18), ("AveCPU", -12), ("NTasks", 8)]
    with pytest.raises(CliExit) as exc:
        sstat.parse_fields("MaxRSS,Bogus")
    assert exc.value.lines == ['sstat: error: Invalid field requested: "Bogus"']
    assert [n for n, _, _ in sstat.parse_fields(sstat.DEFAULT_FIELDS)][:4] == \
        ["JobID", "MaxVMSize", "MaxVMSizeNode", "MaxVMSizeTask"]


def test_sstat_job_specs():
    assert sstat.parse_jobs(["5.batch,6", "7_2.0", "5.batch"]) == [
        {"job_id": 5, "step": "batch"}, {"job_id": 6}, {"job_id": 7, "task": 2, "step": 0}]
    for bad in ("abc", "5.x", "5_", "5_a.0"):
        with pytest.raises(CliExit) as exc:
            sstat.parse_jobs([bad])
        assert exc.value.lines == [f"sstat: fatal: Bad job/step specified: {bad}"]


def test_sstat_rows_render_fixed_width_and_parsable():
    row = {"job_id": 5, "step_id": "batch", "ntasks": 1, "node_list": "node1",
           "usage": stats(task(0, 150, 2000))}
    fields = sstat.parse_fields("JobID,MaxRSS,NTasks")
    assert sstat.render([row], fields) == (
        "JobID            MaxRSS   NTasks \n------------ ---------- -------- \n"
        "5.batch            150M        1 \n")
    assert sstat.render([row], fields, parsable=True, noheader=True) == "5.batch|150M|1|\n"
    row["usage"] = None  # running, not sampled yet
    assert sstat.render([row], fields, parsable2=True, noheader=True) == "5.batch||1\n"


def test_sstat_pids_node_by_node_with_i_and_all_nodes_without():
    row = {"job_id": 5, "step_id": 0, "ntasks": 3, "node_list": "node[1-3]",
           "usage": stats(task(0, 1, 1)), "pids": {"node3": [30], "node1": [10, 11]}}
    pid_fields = sstat.parse_fields(sstat.PID_FIELDS)
    assert sstat.render(sstat.by_node([row]), pid_fields, parsable=True) == (
        "JobID|Nodelist|Pids|\n5.0|node1|10,11|\n5.0|node2||\n5.0|node3|30|\n")
    assert sstat.render([row], sstat.parse_fields("jobid,pids"), parsable2=True,
                        noheader=True) == "5.0|10,11,30\n"  # node-list order, every node
    wide = {**row, "node_list": "node1", "pids": {"node1": list(range(1000, 1010))}}
    assert sstat.render([wide], sstat.parse_fields("pids"), noheader=True) == \
        "1000,1001,1002,1003+ \n"  # Slurm's 20 columns, truncated with "+"
    assert sstat.render([{**row, "pids": {}}], sstat.parse_fields("pids"), parsable2=True,
                        noheader=True) == "\n"  # no sample yet


def seff_record(**kw):
    rec = {"job_id": 42, "user": "alice", "group": "staff", "state": "COMPLETED", "exit_code": 3,
           "num_cpus": 4, "num_nodes": 2, "start_time": 100, "end_time": 110,
           "mem_per_cpu": 512, "tres_alloc": "cpu=4,mem=2G,node=2",
           "steps": [{"step_id": "batch", "usage": stats(task(0, 150, 2345))},
                     {"step_id": 0, "usage": stats(task(0, 100, 20000), task(1, 300, 500))}]}
    rec.update(kw)
    return rec


def test_seff_layout_is_slurms():
    text = seff.report(seff_record(), now=200, cluster="c1")
    assert text == (
        "Job ID: 42\nCluster: c1\nUser/Group: alice/staff\nState: COMPLETED (exit code 3)\n"
        "Nodes: 2\nCores per node: 2\nCPU Utilized: 00:00:23\n"
        "CPU Efficiency: 57.50% of 00:00:40 core-walltime\nJob Wall-clock time: 00:00:10\n"
        "Memory Utilized: 400.00 MB\nMemory Efficiency: 19.53% of 2.00 GB (512.00 MB/core)\n"
        "The task which had the largest memory consumption differs by 150.00% from the "
        "average task max memory consumption\n")


def test_seff_running_pending_and_array_jobs():
    running = seff.report(seff_record(state="RUNNING", end_time=None, num_cpus=1, num_nodes=1,
                                      mem_per_cpu=None, array_job_id=40, array_task_id=2,
                                      steps=[]), now=130, cluster="c1")
    assert "Array Job ID: 40_2\n" in running and "State: RUNNING\n" in running
    assert "Cores: 1\n" in running and "Job Wall-clock time: 00:00:30\n" in running
    assert "Memory Utilized: 0.00 MB\n" in running and "(2.00 GB/node)" in running
    assert running.endswith("accounting database data.\n")
    pending = seff.report(seff_record(state="PENDING", start_time=None), now=130, cluster="c1")
    assert pending.endswith("Efficiency not available for jobs in the PENDING state.\n")
    assert seff.time2str(90061) == "1-01:01:01" and seff.alloc_mem_mb("cpu=1,mem=1.50G") == 1536


def test_sacct_long_format_is_slurms_long_list():
    names = [n for n, _, _ in fmt_sacct.parse_fields(fmt_sacct.LONG_FIELDS)]
    assert names[:5] == ["JobID", "JobIDRaw", "JobName", "Partition", "MaxVMSize"]
    assert "TRESUsageOutTot" == names[-1] and "ReqCPUFreqGov" in names and len(names) == 54
    row = sacct_rows("JobID,AveCPUFreq,ReqCPUFreqMin,ConsumedEnergy")[1]
    assert row == ["7.batch", "0", "Unknown", "0"]
