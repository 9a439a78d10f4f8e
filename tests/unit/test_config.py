"""muster.config: slurm.conf / gres.conf parsing, rendering and location."""

from __future__ import annotations
import os as _os  # noqa: E402
import sys as _sys  # noqa: E402
_sys.path.insert(0, _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))
from shared_path import SHARED  # noqa: E402

import re
import shutil
from pathlib import Path

import pytest

from muster.common.errors import ConfigError
from muster.config import (
    ACCEPTED_KEYS,
    ClusterConfig,
    GresConf,
    NodeConf,
    PartitionConf,
    find_config_path,
    load,
    render,
)

REF = SHARED / "reference" / "slurm-22.05"
TOOLS = SHARED / "tools" / "slurm-ref" / "conf"

HEAD = "ClusterName=test\nSlurmctldHost=ctl(10.0.0.1)\n"


def write(tmp_path: Path, body: str, gres: str | None = None, name: str = "slurm.conf") -> str:
    p = tmp_path / name
    p.write_text(body)
    if gres is not None:
        (tmp_path / "gres.conf").write_text(gres)
    return str(p)


def conf(tmp_path: Path, body: str, gres: str | None = None) -> ClusterConfig:
    return load(write(tmp_path, HEAD + body, gres))


def err(tmp_path: Path, body: str, gres: str | None = None, head: str = HEAD) -> str:
    with pytest.raises(ConfigError) as ei:
        load(write(tmp_path, head + body, gres))
    return str(ei.value)


# --------------------------------------------------------------------------- reference files


@pytest.mark.skipif(not (REF / "slurm.conf").exists(), reason="reference files absent")
def test_reference_slurm_conf():
    c = load(str(REF / "slurm.conf"))
    assert c.warnings == ()
    assert c.cluster_name == "benchcluster"
    assert (c.slurmctld_host, c.slurmctld_addr, c.slurmctld_port) == ("vm", "127.0.0.1", 6917)
    assert c.slurm_user == "slurm"
    assert c.state_save_location == "/var/lib/slurm-bench/ctld"
    assert c.slurmd_spool_dir == "/var/lib/slurm-bench/spool/%n"
    assert c.node_path(c.slurmd_spool_dir, "node2") == "/var/lib/slurm-bench/spool/node2"
    assert c.select_type == "select/cons_tres"
    assert c.select_type_parameters == ("CR_CORE_MEMORY",)
    assert c.def_mem_per_cpu == 1024
    assert c.scheduler_parameters == {"bf_interval": "30"}
    assert c.priority_type == "priority/multifactor"
    assert c.priority_weight_fairshare == 10000
    assert c.priority_weight_age == c.priority_weight_partition == c.priority_weight_qos == 1000
    assert c.priority_weight_job_size == 0
    assert c.priority_decay_half_life == c.priority_max_age == 7 * 86400
    assert c.gres_types == ("gpu",)
    assert c.return_to_service == 2
    assert c.accounting_storage_enforce == ("associations",)
    assert c.max_job_count == 20000 and c.max_array_size == 10001
    assert c.kill_wait == 30 and c.min_job_age == 300 and c.slurmd_timeout == 300
    assert c.wait_time == 0
    assert c.slurmd_parameters == ("config_overrides",)
    # raw keeps canonical casing and values as written
    assert c.raw["PriorityWeightFairShare"] == "10000"
    assert c.raw["WaitTime"] == "0"
    assert c.raw["SlurmctldHost"] == "vm(127.0.0.1)"
    assert c.raw["ProctrackType"] == "proctrack/linuxproc"
    assert "ProctrackType" in ACCEPTED_KEYS or c.proctrack_type == "proctrack/linuxproc"

    assert list(c.nodes) == ["node1", "node2", "node3", "node4"]
    assert c.node_order() == {"node1": 0, "node2": 1, "node3": 2, "node4": 3}
    n1 = c.nodes["node1"]
    assert isinstance(n1, NodeConf)
    assert (n1.addr, n1.hostname, n1.port) == ("127.0.0.1", "localhost", 17101)
    assert c.nodes["node4"].port == 17104
    assert (n1.cpus, n1.boards, n1.sockets, n1.cores_per_socket, n1.threads_per_core) == (
        16, 1, 2, 8, 1)
    assert (n1.real_memory, n1.tmp_disk, n1.weight, n1.state) == (64000, 0, 1, "UNKNOWN")
    assert n1.gres_count("gpu") == 8 and n1.gres_spec == "gpu:8"
    g = n1.gres[0]
    assert g.indices == tuple(range(8))
    assert g.files == tuple(f"/var/lib/slurm-ref/dev/nvidia{i}" for i in range(8))
    assert c.gres_autodetect == "off"

    assert list(c.partitions) == ["gpu", "debug"]
    assert c.default_partition == "gpu"
    gpu, debug = c.partitions["gpu"], c.partitions["debug"]
    assert gpu.default and not debug.default
    assert gpu.nodes == ("node1", "node2", "node3", "node4") and gpu.nodes_expr == "node[1-4]"
    assert gpu.max_time is None and gpu.default_time is None
    assert (debug.max_time, debug.default_time) == (60, 10)
    assert (gpu.state, gpu.priority_tier, gpu.priority_job_factor, gpu.over_subscribe) == (
        "UP", 1, 1, "NO")
    assert gpu.allow_accounts is None and gpu.max_nodes is None and gpu.min_nodes == 0


@pytest.mark.skipif(not (TOOLS / "slurm.conf.in").exists(), reason="reference tools absent")
def test_reference_template_loads(tmp_path):
    subs = {
        "@CLUSTER@": "refcluster", "@HOST@": "vm", "@CTLDPORT@": "6817",
        "@SCHEDPARAMS@": "bf_interval=30,bf_window=2880", "@SLURMDTIMEOUT@": "60",
        "@NODEPORTS@": "17001-17004", "@VAR@": "/var/lib/slurm-ref", "@LOGD@": "/var/log/x",
        "@ETC@": "/etc/slurm-ref",
    }
    text = (TOOLS / "slurm.conf.in").read_text()
    for k, v in subs.items():
        text = text.replace(k, v)
    assert not re.search(r"@[A-Z]+@", text)
    (tmp_path / "slurm.conf").write_text(text)
    shutil.copy(TOOLS / "gres.conf", tmp_path / "gres.conf")
    c = load(str(tmp_path / "slurm.conf"))
    assert [n.port for n in c.nodes.values()] == [17001, 17002, 17003, 17004]
    assert c.scheduler_parameters == {"bf_interval": "30", "bf_window": "2880"}
    assert c.slurmd_timeout == 60
    assert c.nodes["node3"].gres[0].indices == tuple(range(8))


# --------------------------------------------------------------------------- defaults


def test_defaults(tmp_path):
    c = conf(tmp_path, "NodeName=n1\nPartitionName=p Nodes=n1\n")
    assert c.path.endswith("slurm.conf")
    assert (c.slurmctld_port, c.slurmd_port, c.kill_wait, c.min_job_age) == (6817, 6818, 30, 300)
    assert (c.max_array_size, c.max_job_count, c.first_job_id) == (1001, 10000, 1)
    assert c.job_requeue is True and c.job_file_append is False
    assert c.over_time_limit == 0 and c.return_to_service == 0 and c.slurmd_timeout == 300
    assert c.enforce_part_limits == "NO" and c.def_mem_per_cpu == 0 and c.max_mem_per_node == 0
    assert c.requeue_exit == () and c.operators == () and c.gres_types == ()
    assert c.state_save_location == "/var/spool" and c.auth_type == "auth/munge"
    assert c.health_check_program is None and c.health_check_interval == 0
    assert c.scheduler_parameters == {} and c.default_partition is None
    n = c.nodes["n1"]
    assert (n.addr, n.hostname, n.port, n.cpus, n.sockets, n.real_memory, n.weight) == (
        "n1", "n1", None, 1, 1, 1, 1)
    assert (n.features, n.gres, n.state, n.reason) == ((), (), "UNKNOWN", None)
    p = c.partitions["p"]
    assert isinstance(p, PartitionConf)
    assert (p.default, p.state, p.max_time, p.default_time, p.max_nodes, p.min_nodes) == (
        False, "UP", None, None, None, 0)
    assert (p.allow_accounts, p.allow_groups, p.allow_qos, p.grace_time, p.hidden) == (
        None, None, None, 0, False)
    assert p.def_mem_per_cpu is None
    assert c.raw == {"ClusterName": "test", "SlurmctldHost": "ctl(10.0.0.1)"}
    assert (c.slurmctld_host, c.slurmctld_addr) == ("ctl", "10.0.0.1")


def test_globals_typed(tmp_path):
    c = conf(tmp_path, (
        "KillWait=45 MinJobAge=10 MaxArraySize=5\n"
        "RequeueExit=1-3,18 RequeueExitHold=9\n"
        "JobRequeue=0 JobFileAppend=1 OverTimeLimit=UNLIMITED\n"
        "EnforcePartLimits=yes\nDefMemPerGPU=2G MaxMemPerNode=UNLIMITED\n"
        "MusterOperators=alice,bob\nHealthCheckProgram=/bin/hc HealthCheckInterval=60\n"
        "PriorityWeightTRES=cpu=1000,gres/gpu=3000.5\nPriorityCalcPeriod=00:10:00\n"
        "AuthType=auth/muster AuthInfo=key=keys/k.key,ttl=60\n"
        "StateSaveLocation=/tmp/st\n"
        "ProctrackType=proctrack/linuxproc TaskPlugin=task/affinity MpiDefault=pmix\n"
        "AccountingStorageType=accounting_storage/none SlurmdLogFile=/x/%n.log\n"
    ))
    assert (c.kill_wait, c.min_job_age, c.max_array_size) == (45, 10, 5)
    assert c.requeue_exit == (1, 2, 3, 18) and c.requeue_exit_hold == (9,)
    assert c.job_requeue is False and c.job_file_append is True and c.over_time_limit is None
    assert c.enforce_part_limits == "ALL"
    assert c.def_mem_per_gpu == 2048 and c.max_mem_per_node == 0
    assert c.operators == ("alice", "bob")
    assert c.health_check_program == "/bin/hc" and c.health_check_interval == 60
    assert c.priority_weight_tres == {"cpu": 1000.0, "gres/gpu": 3000.5}
    assert c.priority_calc_period == 600
    assert c.key_path == str(tmp_path / "keys" / "k.key")
    assert c.socket_path == "/tmp/st/musterctld.sock" and c.db_path == "/tmp/st/muster.db"
    assert c.raw["MusterOperators"] == "alice,bob"


def test_key_path_default(tmp_path):
    c = conf(tmp_path, "")
    assert c.key_path == str(tmp_path / "muster.key")


def test_slurmctldhost_forms(tmp_path):
    c = load(write(tmp_path, "ClusterName=a\nSlurmctldHost=head\nSlurmctldHost=backup(10.1.1.1)\n"))
    assert (c.slurmctld_host, c.slurmctld_addr, c.slurmctld_hosts) == (
        "head", "head", ("head", "backup"))
    c = load(write(tmp_path, "ClusterName=a\nSlurmctldHost=head\nSlurmctldAddr=1.2.3.4\n"))
    assert c.slurmctld_addr == "1.2.3.4"


def test_missing_required(tmp_path):
    assert "missing required parameter 'ClusterName'" in err(tmp_path, "SlurmctldHost=a\n", head="")
    assert "missing required parameter 'SlurmctldHost'" in err(tmp_path, "ClusterName=a\n", head="")


def test_cluster_name_lowercased(tmp_path):
    c = load(write(tmp_path, "ClusterName=BigOne\nSlurmctldHost=h\n"))
    assert c.cluster_name == "bigone" and c.warnings


# --------------------------------------------------------------------------- syntax


def test_case_insensitive_keys_and_several_per_line(tmp_path):
    c = conf(tmp_path, "killwait=5 MINJOBAGE=7\nnodename=Node1 cpus=4\npartitionname=P nodes=Node1\n")
    assert c.kill_wait == 5 and c.min_job_age == 7
    assert c.raw["KillWait"] == "5" and c.raw["MinJobAge"] == "7"
    assert "Node1" in c.nodes and "P" in c.partitions  # names keep their case


def test_comments_and_escapes(tmp_path):
    c = conf(tmp_path, (
        "# full comment line\n"
        "   \n"
        "KillWait=10   # trailing comment\n"
        "NodeName=n1 Reason=a\\#b Features=x  # c\n"
        "HealthCheckProgram=/bin/c\\\\d\n"
    ))
    assert c.kill_wait == 10
    assert c.nodes["n1"].reason == "a#b"
    assert c.nodes["n1"].features == ("x",)
    assert c.health_check_program == "/bin/c\\d"


def test_quotes(tmp_path):
    c = conf(tmp_path, 'NodeName=n1 Reason="maintenance window # 3" Features="a,b"\n'
                       'PartitionName=p Nodes=n1 AllowAccounts="acct1, acct2"\n')
    assert c.nodes["n1"].reason == "maintenance window # 3"
    assert c.nodes["n1"].features == ("a", "b")
    assert c.partitions["p"].allow_accounts == ("acct1", "acct2")


def test_continuation(tmp_path):
    c = conf(tmp_path, (
        "NodeName=n[1-2] \\\n"
        "   CPUs=8 \\\n"
        "   RealMemory=1000\n"
        "PartitionName=p Nodes=n[1-2] MaxTime=30\n"
        "HealthCheckProgram=/x\\\\\n"   # even number of backslashes: no continuation
        "KillWait=9\n"
    ))
    assert c.nodes["n2"].cpus == 8 and c.nodes["n2"].real_memory == 1000
    assert c.health_check_program == "/x\\"
    assert c.kill_wait == 9


def test_continuation_error_reports_first_line(tmp_path):
    msg = err(tmp_path, "NodeName=n1 \\\n  Bogus=1\n")
    assert msg.endswith("slurm.conf:3: unknown parameter 'Bogus'")


def test_include(tmp_path):
    (tmp_path / "nodes.conf").write_text("NodeName=n[1-3] CPUs=2\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test-parts.conf").write_text("PartitionName=p Nodes=ALL Default=YES\n")
    c = conf(tmp_path, "Include nodes.conf\ninclude sub/%c-parts.conf\n")
    assert list(c.nodes) == ["n1", "n2", "n3"]
    assert c.partitions["p"].nodes == ("n1", "n2", "n3")


def test_include_errors(tmp_path):
    msg = err(tmp_path, "Include missing.conf\n")
    assert re.search(r"slurm\.conf:3: Include file 'missing.conf' not found", msg)
    (tmp_path / "bad.conf").write_text("KillWait=1\nFoo=2\n")
    msg = err(tmp_path, "Include bad.conf\n")
    assert msg == f"{tmp_path / 'bad.conf'}:2: unknown parameter 'Foo'"


def test_include_loop(tmp_path):
    (tmp_path / "loop.conf").write_text("Include loop.conf\n")
    assert "nested too deeply" in err(tmp_path, "Include loop.conf\n")


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "body, what",
    [
        ("Foo=1\n", "unknown parameter 'Foo'"),
        ("KillWait\n", "malformed token 'KillWait' (expected Key=Value)"),
        ("NodeName=n1 CPUs\n", "malformed token 'CPUs'"),
        ('NodeName=n1 Reason="oops\n', "unterminated quote"),
        ("=5\n", "missing key"),
        ("KillWait=abc\n", "invalid value for 'KillWait': 'abc'"),
        ("KillWait=-3\n", "invalid value for 'KillWait'"),
        ("JobRequeue=maybe\n", "invalid value for 'JobRequeue'"),
        ("DefMemPerCPU=lots\n", "invalid value for 'DefMemPerCPU'"),
        ("PriorityDecayHalfLife=soon\n", "invalid value for 'PriorityDecayHalfLife'"),
        ("ReturnToService=5\n", "invalid value for 'ReturnToService'"),
        ("EnforcePartLimits=SOME\n", "invalid value for 'EnforcePartLimits'"),
        ("RequeueExit=1-x\n", "invalid value for 'RequeueExit'"),
        ("SlurmctldPort=99999\n", "invalid value for 'SlurmctldPort'"),
        ("NodeName=n[3-1]\n", "invalid hostlist for 'NodeName': 'n[3-1]'"),
        ("NodeName=n1 CPUs=x\n", "invalid value for 'CPUs': 'x'"),
        ("NodeName=n1 RealMemory=big\n", "invalid value for 'RealMemory'"),
        ("NodeName=n1 State=SLEEPY\n", "invalid value for 'State': 'SLEEPY'"),
        ("NodeName=n1 Bogus=1\n", "unknown parameter 'Bogus'"),
        ("NodeName=n1 Gres=gpu:a:b:4\n", "invalid value for 'Gres'"),
        ("NodeName=n[1-2] Port=[1-3]\n", "Port has 3 ports for 2 nodes"),
        ("NodeName=n[1-2] NodeAddr=a,b,c\n", "NodeAddr has 3 addresses for 2 nodes"),
        ("NodeName=n1\nPartitionName=p Nodes=n1,n9\n", "Nodes names unknown node 'n9'"),
        ("NodeName=n1\nPartitionName=p Nodes=n1 MaxTime=forever\n",
         "invalid value for 'MaxTime': 'forever'"),
        ("NodeName=n1\nPartitionName=p Nodes=n1 State=OPEN\n", "invalid value for 'State'"),
        ("NodeName=n1\nPartitionName=p Nodes=n1 OverSubscribe=SOMETIMES\n",
         "invalid value for 'OverSubscribe'"),
        ("NodeName=n1\nPartitionName=p Nodes=n1 Default=perhaps\n", "invalid value for 'Default'"),
        ("NodeName=n1\nPartitionName=p Nodes=n1 Wibble=2\n", "unknown parameter 'Wibble'"),
        ("CPUs=4\n", "parameter 'CPUs' is only valid on a NodeName/PartitionName line"),
        ("NodeName=n1\nDownNodes=n7\n", "DownNodes names unknown node 'n7'"),
        ("NodeName=n1 Gres=gpu:2\n", "gres 'gpu' is not listed in GresTypes"),
    ],
)
def test_errors_have_file_and_line(tmp_path, body, what):
    msg = err(tmp_path, body)
    lineno = HEAD.count("\n") + body.count("\n")
    assert msg.startswith(f"{tmp_path / 'slurm.conf'}:{lineno}: "), msg
    assert what in msg, msg


def test_error_line_of_bad_default_value(tmp_path):
    msg = err(tmp_path, "NodeName=DEFAULT CPUs=zz\nKillWait=1\nNodeName=n1\n")
    assert msg.startswith(f"{tmp_path / 'slurm.conf'}:3: invalid value for 'CPUs'")


def test_missing_file():
    with pytest.raises(ConfigError, match="not found"):
        load("/nonexistent/slurm.conf")


def test_duplicates_warn_not_error(tmp_path):
    c = conf(tmp_path, (
        "KillWait=10\nKillWait=20\n"
        "NodeName=n1 CPUs=2\nNodeName=n[1-2] CPUs=4\n"
        "PartitionName=a Nodes=n1 Default=YES\nPartitionName=b Nodes=n2 Default=YES\n"
        "PartitionName=a Nodes=n2\n"
    ))
    assert c.kill_wait == 20
    assert c.nodes["n1"].cpus == 2 and c.nodes["n2"].cpus == 4  # first definition wins
    assert c.default_partition == "a"
    assert c.partitions["a"].default and not c.partitions["b"].default
    assert c.partitions["a"].nodes == ("n1",)
    w = "\n".join(c.warnings)
    assert "KillWait specified more than once" in w
    assert "duplicate node 'n1'" in w
    assert "also has Default=YES" in w and "slurm.conf:9:" in w
    assert "duplicate partition 'a'" in w


# --------------------------------------------------------------------------- nodes


def test_node_default_lines_cumulative(tmp_path):
    c = conf(tmp_path, (
        "NodeName=DEFAULT CPUs=8 RealMemory=1000\n"
        "NodeName=a1\n"
        "NodeName=DEFAULT RealMemory=2000 Features=big\n"
        "NodeName=a2\n"
        "NodeName=a3 CPUs=2 Features=small\n"
    ))
    a1, a2, a3 = (c.nodes[n] for n in ("a1", "a2", "a3"))
    assert (a1.cpus, a1.real_memory, a1.features) == (8, 1000, ())
    assert (a2.cpus, a2.real_memory, a2.features) == (8, 2000, ("big",))
    assert (a3.cpus, a3.real_memory, a3.features) == (2, 2000, ("small",))
    assert "DEFAULT" not in c.nodes


def test_cpus_derived(tmp_path):
    c = conf(tmp_path, (
        "NodeName=a Boards=2 SocketsPerBoard=2 CoresPerSocket=4 ThreadsPerCore=2\n"
        "NodeName=b Sockets=2 CoresPerSocket=8\n"
        "NodeName=c CPUs=12\n"
        "NodeName=d CPUs=16 CoresPerSocket=8\n"
        "NodeName=e CPUs=99 Sockets=2 CoresPerSocket=4\n"
    ))
    a = c.nodes["a"]
    assert (a.cpus, a.boards, a.sockets, a.cores_per_socket, a.threads_per_core) == (32, 2, 4, 4, 2)
    assert (c.nodes["b"].cpus, c.nodes["b"].sockets) == (16, 2)
    assert (c.nodes["c"].cpus, c.nodes["c"].sockets, c.nodes["c"].cores_per_socket) == (12, 12, 1)
    assert (c.nodes["d"].cpus, c.nodes["d"].sockets) == (16, 2)
    assert c.nodes["e"].cpus == 8 and any("resetting CPUs" in w for w in c.warnings)


def test_hostlists_ports_addrs(tmp_path):
    c = conf(tmp_path, (
        "NodeName=gpu[01-03] NodeAddr=10.0.0.[1-3] NodeHostname=h[1-3] Port=[17001-17003]\n"
        "NodeName=x,y Port=7000\n"
    ))
    assert list(c.nodes) == ["gpu01", "gpu02", "gpu03", "x", "y"]
    g2 = c.nodes["gpu02"]
    assert (g2.addr, g2.hostname, g2.port) == ("10.0.0.2", "h2", 17002)
    assert c.nodes["x"].port == c.nodes["y"].port == 7000
    assert c.nodes["x"].addr == "x"


def test_nodes_features_weight_state(tmp_path):
    c = conf(tmp_path, "NodeName=n1 Feature=a100,ib Weight=5 State=drain Reason=\"bad fan\""
                       " TmpDisk=1G\n")
    n = c.nodes["n1"]
    assert (n.features, n.weight, n.state, n.reason, n.tmp_disk) == (
        ("a100", "ib"), 5, "DRAIN", "bad fan", 1024)


def test_downnodes(tmp_path):
    c = conf(tmp_path, "NodeName=n[1-3]\nDownNodes=n[2-3] Reason=\"dead psu\"\n"
                       "DownNodes=n1 State=DRAIN Reason=x\n")
    assert c.nodes["n2"].state == "DOWN" and c.nodes["n2"].reason == "dead psu"
    assert c.nodes["n1"].state == "DRAIN"


def test_accepted_unused_node_keys(tmp_path):
    c = conf(tmp_path, "NodeName=n1 CpuSpecList=0,1 MemSpecLimit=100 CoreSpecCount=1\n")
    assert c.nodes["n1"].mem_spec_limit == 100


# --------------------------------------------------------------------------- partitions


def test_partitions(tmp_path):
    c = conf(tmp_path, (
        "NodeName=n[1-4]\n"
        "NodeSet=evens Nodes=n2,n4\n"
        "PartitionName=DEFAULT MaxTime=2:00:00 PriorityTier=3\n"
        "PartitionName=all Nodes=ALL Default=YES\n"
        "PartitionName=DEFAULT DefaultTime=10\n"
        "PartitionName=ev Nodes=evens AllowAccounts=a,b AllowQos=ALL Hidden=YES "
        "OverSubscribe=force:4 GraceTime=30 DefMemPerCPU=512 MaxNodes=2 MinNodes=1 "
        "PriorityJobFactor=7 State=DRAIN AllowGroups=wheel\n"
        "PartitionName=rev Nodes=n4,n1 MaxTime=UNLIMITED\n"
        "PartitionName=empty\n"
    ))
    assert list(c.partitions) == ["all", "ev", "rev", "empty"]
    a, ev, rev = c.partitions["all"], c.partitions["ev"], c.partitions["rev"]
    assert a.nodes == ("n1", "n2", "n3", "n4") and a.nodes_expr == "ALL"
    assert (a.max_time, a.default_time, a.priority_tier) == (120, None, 3)
    assert (ev.max_time, ev.default_time) == (120, 10)
    assert ev.nodes == ("n2", "n4")
    assert ev.allow_accounts == ("a", "b") and ev.allow_qos is None
    assert ev.allow_groups == ("wheel",)
    assert ev.hidden and ev.over_subscribe == "FORCE:4" and ev.grace_time == 30
    assert ev.def_mem_per_cpu == 512 and ev.max_nodes == 2 and ev.min_nodes == 1
    assert ev.priority_job_factor == 7 and ev.state == "DRAIN"
    assert rev.nodes == ("n1", "n4") and rev.max_time is None  # config order
    assert c.partitions["empty"].nodes == ()
    assert c.nodesets == {"evens": ("n2", "n4")}
    assert c.mem_limits("ev")["def_mem_per_cpu"] == 512


def test_partition_before_nodes(tmp_path):
    c = conf(tmp_path, "PartitionName=p Nodes=n[1-2]\nNodeName=n[1-2]\n")
    assert c.partitions["p"].nodes == ("n1", "n2")


def test_mem_limits_inherit(tmp_path):
    c = conf(tmp_path, "DefMemPerCPU=1000 MaxMemPerCPU=4000\nNodeName=n1\n"
                       "PartitionName=a Nodes=n1\nPartitionName=b Nodes=n1 DefMemPerNode=9000\n")
    assert c.mem_limits("a")["def_mem_per_cpu"] == 1000
    assert c.mem_limits("b")["def_mem_per_cpu"] == 0
    assert c.mem_limits("b")["def_mem_per_node"] == 9000
    assert c.mem_limits("b")["max_mem_per_cpu"] == 4000


# --------------------------------------------------------------------------- gres


GRES_HEAD = "GresTypes=gpu,shard\n"


def test_gres_emulated_without_gres_conf(tmp_path):
    c = conf(tmp_path, GRES_HEAD + "NodeName=n1 Gres=gpu:a100:2,gpu:v100:3,shard:8\n")
    g = c.nodes["n1"].gres
    assert [x.spec for x in g] == ["gpu:a100:2", "gpu:v100:3", "shard:8"]
    assert g[0].indices == (0, 1) and g[1].indices == (2, 3, 4) and g[2].indices == tuple(range(8))
    assert all(x.files == () for x in g)
    assert c.nodes["n1"].gres_count("gpu") == 5
    assert c.gres_conf_path is None


def test_gres_conf_file_order_defines_indices(tmp_path):
    gres = (
        "AutoDetect=off\n"
        "NodeName=n[1-2] Name=gpu Type=v100 File=/dev/nvidia[2-3] Cores=8-15\n"
        "NodeName=n[1-2] Name=gpu Type=a100 File=/dev/nvidia0,/dev/nvidia1 Cores=0-7\n"
    )
    c = conf(tmp_path, GRES_HEAD + "NodeName=n[1-2] Gres=gpu:a100:2,gpu:v100:2\n", gres)
    a100, v100 = c.nodes["n2"].gres
    assert isinstance(a100, GresConf)
    # gres.conf lists v100 first, so it owns indices 0,1
    assert v100.indices == (0, 1) and v100.files == ("/dev/nvidia2", "/dev/nvidia3")
    assert a100.indices == (2, 3) and a100.files == ("/dev/nvidia0", "/dev/nvidia1")
    assert a100.cores == (tuple(range(8)),) * 2


def test_gres_conf_without_nodename_and_count(tmp_path):
    gres = "Name=gpu File=/dev/nvidia[0-3]\nNodeName=n2 Name=shard Count=16\n"
    c = conf(tmp_path, GRES_HEAD + "NodeName=n1 Gres=gpu:4\nNodeName=n2 Gres=gpu:4,shard:16\n",
             gres)
    assert c.nodes["n1"].gres[0].files[-1] == "/dev/nvidia3"
    assert c.nodes["n2"].gres[1].indices == tuple(range(16))


def test_gres_node_without_gres_conf_line_is_emulated(tmp_path):
    gres = "NodeName=n1 Name=gpu File=/dev/nvidia[0-1]\n"
    c = conf(tmp_path, GRES_HEAD + "NodeName=n[1-2] Gres=gpu:2\n", gres)
    assert c.nodes["n1"].gres[0].files and c.nodes["n2"].gres[0].files == ()
    assert c.nodes["n2"].gres[0].indices == (0, 1)


def test_gres_count_mismatch(tmp_path):
    gres = "AutoDetect=off\nNodeName=n1 Name=gpu File=/dev/nvidia[0-3]\n"
    with pytest.raises(ConfigError) as ei:
        conf(tmp_path, GRES_HEAD + "NodeName=n1 Gres=gpu:8\n", gres)
    msg = str(ei.value)
    assert msg.startswith(f"{tmp_path / 'gres.conf'}:2: ")
    assert "gres.conf has 4 gpu" in msg and "says 8" in msg


@pytest.mark.parametrize(
    "gres, what",
    [
        ("NodeName=n1 Name=gpu Type=h100 File=/dev/nvidia0\n", "Type=h100"),
        ("NodeName=n1 Name=shard Count=4\n", "has no Gres=shard"),
        ("NodeName=n1 Name=gpu Count=2 File=/dev/nvidia0\n", "Count=2 does not match"),
        ("NodeName=n1 Name=fpga Count=1\n", "not listed in GresTypes"),
        ("NodeName=n1 Name=gpu Bogus=1\n", "unknown parameter 'Bogus'"),
        ("NodeName=n1 File=/dev/nvidia0\n", "missing 'Name'"),
        ("AutoDetect=magic\n", "invalid value for 'AutoDetect'"),
        ("NodeName=n1 Name=gpu File=/dev/nvidia[1-0]\n", "invalid hostlist for 'File'"),
    ],
)
def test_gres_conf_errors(tmp_path, gres, what):
    with pytest.raises(ConfigError) as ei:
        conf(tmp_path, GRES_HEAD + "NodeName=n1 Gres=gpu:1\n", gres)
    msg = str(ei.value)
    assert msg.startswith(f"{tmp_path / 'gres.conf'}:1: "), msg
    assert what in msg, msg


def test_gres_conf_unknown_node_warns(tmp_path):
    c = conf(tmp_path, GRES_HEAD + "NodeName=n1 Gres=gpu:1\n",
             "NodeName=zz Name=gpu File=/dev/nvidia0\n")
    assert any("unknown node" in w for w in c.warnings)


# --------------------------------------------------------------------------- render


def test_render_round_trip(tmp_path):
    nodes = [
        {"NodeName": f"node{i}", "NodeAddr": f"127.0.1.{i}", "Port": 17000 + i, "CPUs": 16,
         "RealMemory": 64000, "Gres": "gpu:8", "Features": ["a100", "nvlink"]}
        for i in range(1, 4)
    ]
    nodes.append({"NodeName": "cpu1", "CPUs": 4, "RealMemory": 8000, "State": "UNKNOWN",
                  "Reason": "odd # value with spaces"})
    parts = [
        {"PartitionName": "gpu", "Nodes": "node[1-3]", "Default": True, "MaxTime": "INFINITE"},
        {"PartitionName": "debug", "Nodes": "ALL", "MaxTime": "01:00:00", "DefaultTime": 10,
         "AllowAccounts": None},
    ]
    glb = {"SlurmctldHost": "head(127.0.0.1)", "SlurmctldPort": 7817,
           "StateSaveLocation": str(tmp_path / "state"), "AuthType": "auth/muster",
           "SchedulerParameters": "bf_interval=5,bf_window=60", "MusterOperators": ["ops"],
           "DefMemPerCPU": 1000, "JobRequeue": False, "HealthCheckProgram": "/opt/my hc"}
    slurm_text, gres_text = render("mini", nodes, parts, glb)
    assert slurm_text.splitlines()[0] == "# muster-managed"
    path = write(tmp_path, slurm_text, gres_text)
    c = load(path)
    assert c.warnings == ()
    assert c.cluster_name == "mini" and c.slurmctld_port == 7817
    assert (c.slurmctld_host, c.slurmctld_addr) == ("head", "127.0.0.1")
    assert c.gres_types == ("gpu",) and c.operators == ("ops",)
    assert c.job_requeue is False and c.def_mem_per_cpu == 1000
    assert c.health_check_program == "/opt/my hc"
    assert c.scheduler_parameters == {"bf_interval": "5", "bf_window": "60"}
    assert list(c.nodes) == ["node1", "node2", "node3", "cpu1"]
    n2 = c.nodes["node2"]
    assert (n2.addr, n2.port, n2.cpus, n2.real_memory, n2.features) == (
        "127.0.1.2", 17002, 16, 64000, ("a100", "nvlink"))
    assert n2.gres[0].indices == tuple(range(8)) and n2.gres[0].files == ()
    assert c.nodes["cpu1"].reason == "odd # value with spaces"
    assert c.partitions["gpu"].default and c.partitions["gpu"].max_time is None
    assert c.partitions["debug"].nodes == ("node1", "node2", "node3", "cpu1")
    assert (c.partitions["debug"].max_time, c.partitions["debug"].default_time) == (60, 10)
    # a second render of the same input is identical (deterministic)
    assert render("mini", nodes, parts, glb) == (slurm_text, gres_text)


def test_render_with_gres_files(tmp_path):
    nodes = [{"NodeName": "n1", "CPUs": 8, "Gres": "gpu:a100:2",
              "GresConf": [{"Name": "gpu", "Type": "a100", "File": "/dev/nvidia[0-1]"}]}]
    s, g = render("c", nodes, [{"PartitionName": "p", "Nodes": "n1"}], {})
    c = load(write(tmp_path, s, g))
    assert c.slurmctld_host == "localhost"
    assert c.nodes["n1"].gres[0].files == ("/dev/nvidia0", "/dev/nvidia1")
    assert c.nodes["n1"].gres[0].type == "a100"


def test_render_rejects_quote():
    with pytest.raises(ConfigError):
        render("c", [{"NodeName": "n1", "Reason": 'say "hi"'}], [], {})


# --------------------------------------------------------------------------- locate


def _clear(monkeypatch):
    for k in ("MUSTER_CONF", "SLURM_CONF", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(k, raising=False)


def test_locate_order(tmp_path, monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    import muster.config.locate as locate_mod
    monkeypatch.setattr(locate_mod, "SYSTEM_PATH", str(tmp_path / "etc" / "slurm.conf"))
    assert find_config_path() is None

    home_conf = tmp_path / "home" / ".config" / "muster" / "slurm.conf"
    home_conf.parent.mkdir(parents=True)
    home_conf.write_text("# muster-managed\n")
    assert find_config_path() == str(home_conf)

    xdg = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    assert find_config_path() is None
    (xdg / "muster").mkdir(parents=True)
    (xdg / "muster" / "slurm.conf").write_text("x")
    assert find_config_path() == str(xdg / "muster" / "slurm.conf")

    # SLURM_CONF without marker is ignored, with marker wins over XDG
    plain = tmp_path / "plain.conf"
    plain.write_text("ClusterName=real\n")
    monkeypatch.setenv("SLURM_CONF", str(plain))
    assert find_config_path() == str(xdg / "muster" / "slurm.conf")
    marked = tmp_path / "marked.conf"
    marked.write_text("# muster-managed\nClusterName=x\n")
    monkeypatch.setenv("SLURM_CONF", str(marked))
    assert find_config_path() == str(marked)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "gone.conf"))
    assert find_config_path() == str(xdg / "muster" / "slurm.conf")

    # MUSTER_CONF beats everything
    monkeypatch.setenv("SLURM_CONF", str(marked))
    monkeypatch.setenv("MUSTER_CONF", str(tmp_path / "explicit.conf"))
    assert find_config_path() == str(tmp_path / "explicit.conf")


def test_locate_explicit_environ(tmp_path):
    marked = tmp_path / "m.conf"
    marked.write_text("# muster-managed\n")
    env = {"SLURM_CONF": str(marked), "HOME": str(tmp_path)}
    assert find_config_path(env) == str(marked)
    assert find_config_path({"MUSTER_CONF": "/a/b"}) == "/a/b"


def test_locate_imports_only_os():
    import ast

    import muster.config.locate as loc

    tree = ast.parse(Path(loc.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert imported == {"os"}


def test_render_marker_found_by_locate(tmp_path):
    s, g = render("c", [{"NodeName": "n1"}], [], {})
    p = Path(write(tmp_path, s, g))
    assert find_config_path({"SLURM_CONF": str(p), "HOME": str(tmp_path)}) == str(p)


def test_importing_locate_does_not_load_parser():
    import subprocess
    import sys

    code = (
        "import sys; from muster.config.locate import find_config_path; "
        "print('muster.config.slurmconf' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
