"""sbatch option handling (muster.cli.jobopts): request dict, script checks, precedence."""

from __future__ import annotations

import os
import shlex

import pytest

from muster.cli import jobopts
from muster.cli.getopt import CliExit, UsageError
from muster.cli.jobopts import (
    SCRIPT_MAX_BYTES,
    build_export_env,
    check_dependency,
    parse_gres,
    parse_signal,
    parse_sbatch,
    split_directive,
)

NOW = 1_700_000_000
STDIN_CALLS: list[int] = []


def run(argv, env=None, stdin=b"", cwd="/tmp"):
    STDIN_CALLS.clear()

    def reader(n):
        STDIN_CALLS.append(n)
        return stdin

    return parse_sbatch(list(argv), dict(env or {}), reader, str(cwd), NOW)


def req(*argv, env=None, cwd="/tmp"):
    return run(list(argv) + ["--wrap", "true"], env=env, cwd=cwd).request


def fail(argv, env=None, stdin=b"", cwd="/tmp") -> CliExit:
    with pytest.raises(CliExit) as ei:
        run(argv, env=env, stdin=stdin, cwd=cwd)
    return ei.value


def write(tmp_path, text, name="job.sh"):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


# -- defaults and shape --------------------------------------------------------------------------


def test_defaults_are_null():
    r = req()
    for key in ("name", "partition", "account", "qos", "time_limit", "nodes_min", "ntasks",
                "mem_per_node", "mem_per_cpu", "mem_per_gpu", "gpus", "array", "dependency",
                "requeue", "signal", "open_mode", "export", "begin", "nodelist", "nice",
                "std_out", "std_err", "std_in", "command", "script_name"):
        assert r[key] is None, key
    assert r["gres"] == [] and r["hold"] is False and r["exclusive"] is False
    assert r["wrap"] is True and r["argv"] == []
    assert r["work_dir"] == "/tmp"
    assert isinstance(r["umask"], int) and isinstance(r["submit_host"], str)
    assert "." not in r["submit_host"]


def test_umask_read_and_restored():
    before = os.umask(0o027)
    try:
        assert req()["umask"] == 0o027
        assert os.umask(0o027) == 0o027
    finally:
        os.umask(before)


def test_submit_line():
    inv = run(["-J", "a b", "--wrap", "echo 'x'"])
    assert inv.request["submit_line"] == shlex.join(["sbatch", "-J", "a b", "--wrap", "echo 'x'"])


# -- wrap ----------------------------------------------------------------------------------------


def test_wrap_script_text():
    inv = run(["--wrap", "echo hi; exit 3"])
    assert inv.script == (
        "#!/bin/sh\n# This script was created by sbatch --wrap.\n\necho hi; exit 3\n"
    )
    assert inv.request["wrap"] is True
    assert inv.request["command"] is None and inv.request["script_name"] is None
    assert STDIN_CALLS == []


def test_wrap_with_script_arguments():
    e = fail(["--wrap", "true", "extra"])
    assert e.lines == ["sbatch: error: Script arguments not permitted with --wrap option"]
    assert e.code == 1


# -- numeric and resource options ----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,mn,mx",
    [(["-N", "2"], 2, 2), (["-N2-4"], 2, 4), (["--nodes=3"], 3, 3), (["--nodes", "1-15:4"], 1, 15),
     (["-N", "2k"], 2048, 2048)],
)
def test_nodes(argv, mn, mx):
    r = req(*argv)
    assert (r["nodes_min"], r["nodes_max"]) == (mn, mx)


@pytest.mark.parametrize("value,bad", [("abc", "abc"), ("", ""), ("1-x", "x"), ("x-3", "x"),
                                       ("-3x", "3x"), ("1.5", "1.5")])
def test_nodes_invalid(value, bad):
    e = fail(["-N", value, "--wrap", "true"])
    assert e.code == 255
    assert e.lines == [f'sbatch: error: "{bad}" is not a valid node count']  # Slurm 22.05's


@pytest.mark.parametrize("value,mn,mx", [("-3", 1, 3), ("-1", 1, 1), ("0-2", 1, 2), ("-0", 1, None),
                                         ("2-0", 2, None), ("0", 0, 0)])
def test_nodes_as_slurm_reads_them(value, mn, mx):
    # an empty minimum is 1, a maximum of 0 is none; -N0 is left to the controller to refuse
    r = req("-N", value)
    assert (r["nodes_min"], r["nodes_max"]) == (mn, mx)


@pytest.mark.parametrize("value,mn", [("3-", 3), ("-", 1)])
def test_nodes_empty_maximum_is_below_minimum(value, mn):
    e = fail(["-N", value, "--wrap", "true"])
    assert (e.code, e.lines) == (255, [f"sbatch: error: Maximum node count -1 is less than "
                                       f"minimum node count {mn}"])


def test_nodes_max_below_min_has_slurms_message():
    e = fail(["-N", "4-2", "--wrap", "true"])
    assert e.code == 255
    assert e.lines == ["sbatch: error: Maximum node count 2 is less than minimum node count 4"]


def test_task_and_cpu_counts():
    r = req("-n", "4", "--ntasks-per-node=2", "--cpus-per-gpu=2")
    assert (r["ntasks"], r["ntasks_per_node"], r["cpus_per_gpu"]) == (4, 2, 2)
    r = req("-n4", "--ntasks-per-node", "2", "-c", "3")
    assert (r["ntasks"], r["ntasks_per_node"], r["cpus_per_task"]) == (4, 2, 3)


@pytest.mark.parametrize("argv", [["--ntasks=0"], ["-n", "x"], ["-c", "0"], ["--ntasks-per-node=-1"]])
def test_counts_invalid(argv):
    e = fail(argv + ["--wrap", "true"])
    assert e.code == 255
    assert e.lines[0].startswith('sbatch: error: Invalid numeric value "')


def test_cpus_per_gpu_and_cpus_per_task_exclusive():
    e = fail(["-c", "2", "--cpus-per-gpu=2", "--wrap", "true"])
    assert e.lines == ["sbatch: fatal: --cpus-per-gpu is mutually exclusive with --cpus-per-task"]
    assert e.code == 1
    # one from SBATCH_*, the other on the command line: the command line wins
    r = req("-c", "2", env={"SBATCH_CPUS_PER_GPU": "4"})
    assert (r["cpus_per_task"], r["cpus_per_gpu"]) == (2, None)


def test_memory():
    assert req("--mem=4G")["mem_per_node"] == 4096
    assert req("--mem", "0")["mem_per_node"] == 0
    assert req("--mem-per-cpu=512")["mem_per_cpu"] == 512
    assert req("--mem-per-gpu=1T")["mem_per_gpu"] == 1024 * 1024


def test_memory_invalid():
    e = fail(["--mem=lots", "--wrap", "true"])
    assert (e.lines, e.code) == (["sbatch: error: Invalid --mem specification"], 255)
    e = fail(["--mem-per-cpu=-1", "--wrap", "true"])
    assert e.lines == ["sbatch: error: Invalid --mem-per-cpu specification"]


@pytest.mark.parametrize(
    "argv",
    [["--mem=1G", "--mem-per-cpu=1G"], ["--mem=1G", "--mem-per-gpu=1G"],
     ["--mem-per-cpu=1", "--mem-per-gpu=1"]],
)
def test_memory_mutually_exclusive(argv):
    e = fail(argv + ["--wrap", "true"])
    assert e.lines == ["sbatch: fatal: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive."]
    assert e.code == 1


def test_memory_same_option_repeated_is_fine():
    assert req("--mem=1G", "--mem=2G")["mem_per_node"] == 2048


def test_memory_cli_beats_env_of_other_kind():
    r = req("--mem-per-cpu=100", env={"SBATCH_MEM_PER_NODE": "1G"})
    assert (r["mem_per_node"], r["mem_per_cpu"]) == (None, 100)
    e = fail(["--wrap", "true"], env={"SBATCH_MEM_PER_NODE": "1G", "SBATCH_MEM_PER_CPU": "1"})
    assert e.lines[0].startswith("sbatch: fatal: SBATCH_MEM_PER_CPU")


def test_memory_script_and_cli_conflict(tmp_path):
    p = write(tmp_path, "#!/bin/sh\n#SBATCH --mem=1G\ntrue\n")
    e = fail(["--mem-per-cpu=1", str(p)])
    assert "mutually exclusive" in e.lines[0]


# -- GRES / GPUs ---------------------------------------------------------------------------------


def test_gres_forms():
    assert parse_gres("gpu") == [{"name": "gpu", "type": None, "count": 1}]
    assert parse_gres("gpu:2") == [{"name": "gpu", "type": None, "count": 2}]
    assert parse_gres("gpu:a100:2") == [{"name": "gpu", "type": "a100", "count": 2}]
    assert parse_gres("gpu:a100") == [{"name": "gpu", "type": "a100", "count": 1}]
    assert parse_gres("gpu:2,shard:4") == [
        {"name": "gpu", "type": None, "count": 2},
        {"name": "shard", "type": None, "count": 4},
    ]
    assert parse_gres("gres/gpu:1") == [{"name": "gpu", "type": None, "count": 1}]
    assert parse_gres("none") == []


def test_gres_non_numeric_count_is_a_type():
    assert req("--gres=gpu:abc")["gres"] == [{"name": "gpu", "type": "abc", "count": 1}]


@pytest.mark.parametrize("value", ["gpu:a100:abc", "gpu::2", ":2", "gpu:a:1:2", "gpu,,x"])
def test_gres_invalid(value):
    e = fail(["--gres=" + value, "--wrap", "true"])
    assert e.lines == ["sbatch: error: Invalid generic resource (gres) specification"]


def test_gres_none_clears_script_value(tmp_path):
    p = write(tmp_path, "#!/bin/sh\n#SBATCH --gres=gpu:2\ntrue\n")
    assert run([str(p)]).request["gres"] == [{"name": "gpu", "type": None, "count": 2}]
    assert run(["--gres=none", str(p)]).request["gres"] == []


def test_gpus_options():
    r = req("-G", "4", "--gpus-per-task=a100:1")
    assert r["gpus"] == {"type": None, "count": 4}
    assert r["gpus_per_task"] == {"type": "a100", "count": 1}
    assert req("--gpus=v100:2")["gpus"] == {"type": "v100", "count": 2}
    assert req("--gpus=gpu:v100:2")["gpus"] == {"type": "v100", "count": 2}
    e = fail(["--gpus=a:b", "--wrap", "true"])
    assert (e.lines, e.code) == (["sbatch: error: Invalid --gpus specification"], 255)


def test_gpus_per_node_feeds_gres():
    assert req("--gpus-per-node=2")["gres"] == [{"name": "gpu", "type": None, "count": 2}]
    r = req("--gres=shard:1", "--gpus-per-node=a100:3")
    assert r["gres"] == [
        {"name": "shard", "type": None, "count": 1},
        {"name": "gpu", "type": "a100", "count": 3},
    ]
    # the later of --gres=gpu:… and --gpus-per-node decides the GPU count
    assert req("--gpus-per-node=2", "--gres=gpu:4")["gres"][0]["count"] == 4
    assert req("--gres=gpu:4", "--gpus-per-node=2")["gres"][0]["count"] == 2


# -- time ----------------------------------------------------------------------------------------


def test_time():
    assert req("-t", "1:00:00")["time_limit"] == 60
    assert req("--time=2-0")["time_limit"] == 2880
    assert req("-t", "UNLIMITED")["time_limit"] == -1
    assert req("--time-min=30")["time_min"] == 30


def test_time_invalid():
    e = fail(["-t", "abc", "--wrap", "true"])
    assert e.lines == ["sbatch: error: Invalid --time specification"]
    assert e.code == 255
    e = fail(["--time-min=x", "--wrap", "true"])
    assert e.lines == ["sbatch: error: Invalid --time-min specification"]


def test_begin_and_deadline():
    assert req("--begin=now+60")["begin"] == NOW + 60
    assert req("-b", "now+1minutes")["begin"] == NOW + 60
    assert req("--deadline=now+3600")["deadline"] == NOW + 3600
    e = fail(["--begin=garbage", "--wrap", "true"])
    assert (e.lines, e.code) == (["sbatch: error: Invalid --begin specification"], 255)


# -- strings -------------------------------------------------------------------------------------


def test_string_options():
    r = req("-p", "gpu,debug", "-A", "research", "-q", "normal", "-J", "job", "-o", "out-%j",
            "-e", "err-%j", "-i", "/dev/null", "-a", "0-15:4%2", "--comment=hello world",
            "--reservation=r1", "-C", "a&b", "--mail-type=END,FAIL", "--mail-user=u@x",
            "--wckey=k", "--hint=nomultithread", "-m", "block", "--tres-per-task=cpu=2",
            "--gpu-bind=closest", "-M", "c1", "--mpi=pmix")
    assert r["partition"] == "gpu,debug" and r["account"] == "research" and r["qos"] == "normal"
    assert r["name"] == "job" and r["std_out"] == "out-%j" and r["std_err"] == "err-%j"
    assert r["std_in"] == "/dev/null" and r["array"] == "0-15:4%2"
    assert r["comment"] == "hello world" and r["reservation"] == "r1"
    assert r["constraint"] == "a&b" and r["mail_type"] == "END,FAIL" and r["mail_user"] == "u@x"
    assert r["wckey"] == "k" and r["hint"] == "nomultithread" and r["distribution"] == "block"
    assert r["tres_per_task"] == "cpu=2" and r["gpu_bind"] == "closest"
    assert r["clusters"] == "c1" and r["mpi"] == "pmix"


def test_abbreviated_long_options():
    r = req("--part=debug", "--acco=a", "--job-n=x", "--reserv=r")
    assert (r["partition"], r["account"], r["name"], r["reservation"]) == ("debug", "a", "x", "r")


def test_chdir(tmp_path):
    r = req("-D", "sub/dir", cwd=tmp_path)
    assert r["work_dir"] == str(tmp_path / "sub" / "dir")
    assert r["submit_dir"] == str(tmp_path)
    assert req("--chdir=/abs/../x", cwd=tmp_path)["work_dir"] == "/x"
    assert req(cwd=tmp_path)["work_dir"] == str(tmp_path)


def test_flags():
    r = req("-H", "--requeue", "--exclusive", "-k", "-O")
    assert r["hold"] is True and r["requeue"] is True and r["exclusive"] is True
    assert r["no_kill"] is True and r["overcommit"] is True
    assert req("--requeue", "--no-requeue")["requeue"] is False
    assert req("--exclusive=user")["exclusive_mode"] == "user"
    r = req("--exclusive", "-s")
    assert r["exclusive"] is False and r["oversubscribe"] is True
    e = fail(["--exclusive=bogus", "--wrap", "true"])
    assert e.code == 255


def test_client_flags():
    inv = run(["--parsable", "-W", "-vv", "-Q", "--wrap", "true"])
    assert inv.parsable and inv.wait and inv.quiet
    assert inv.verbose == 2


def test_test_only_is_refused_not_submitted():
    """Muster has no will-run estimate: --test-only would submit the job, so it is refused."""
    e = fail(["--test-only", "--wrap", "true"])
    assert e.code == 1
    assert e.lines == ["sbatch: error: --test-only is not supported by Muster: no will-run "
                       "estimate: the job would be submitted"]


@pytest.mark.parametrize("flag,attr", [("-h", "help"), ("--help", "help"), ("--usage", "usage"),
                                       ("-V", "version"), ("--version", "version")])
def test_help_usage_version_skip_script(flag, attr):
    """They end sbatch at once (getopt.InfoExit), before any script is read."""
    from muster.cli.getopt import InfoExit
    with pytest.raises(InfoExit) as info:
        run([flag, "/nonexistent/script.sh"])
    assert info.value.kind == attr and info.value.code == 0 and info.value.stdout
    assert STDIN_CALLS == []


def test_nice_and_priority():
    assert req("--nice")["nice"] == 100
    assert req("--nice=-5")["nice"] == -5
    assert req("--priority=7")["priority"] == 7
    assert req("--priority=TOP")["priority"] == jobopts.PRIORITY_TOP
    assert fail(["--nice=x", "--wrap", "true"]).code == 255


def test_open_mode():
    assert req("--open-mode=append")["open_mode"] == "append"
    assert req("--open-mode=truncate")["open_mode"] == "truncate"
    assert fail(["--open-mode=sideways", "--wrap", "true"]).code == 255


def test_nodelist_and_file(tmp_path):
    assert req("-w", "node[1-2],node4")["nodelist"] == "node[1-2],node4"
    assert req("--exclude=node3")["exclude"] == "node3"
    f = tmp_path / "hosts"
    f.write_text("node1\nnode[3-4]\n\n")
    assert req("-w", str(f))["nodelist"] == "node1,node[3-4]"
    assert req("--nodelist=./hosts", cwd=tmp_path)["nodelist"] == "node1,node[3-4]"
    e = fail(["-w", "/nonexistent/hosts", "--wrap", "true"])
    assert e.lines == ["sbatch: error: Unable to open file /nonexistent/hosts"]


def test_accepted_and_ignored_options():
    r = req("--get-user-env", "-M", "x", "--kill-on-invalid-dep=yes", "--ignore-pbs",
            "--uid=0", "--gid=root", "--propagate", "--threads-per-core=1", "--use-min-nodes")
    assert r["kill_on_invalid_dep"] is True and r["uid"] == 0 and r["gid"] == 0
    assert fail(["--kill-on-invalid-dep=maybe", "--wrap", "true"]).code == 255


@pytest.mark.parametrize("opt", ["uid", "gid"])
def test_uid_gid_only_for_root(monkeypatch, opt):
    """Slurm's arg_set_uid/arg_set_gid: a plain user is refused before anything is sent."""
    monkeypatch.setattr(jobopts.os, "getuid", lambda: 1001)
    e = fail([f"--{opt}=0", "--wrap", "true"])
    assert (e.code, e.lines) == (255, [f"sbatch: error: --{opt} only permitted by root user"])


@pytest.mark.parametrize("opt", ["uid", "gid"])
def test_uid_gid_unknown_name(monkeypatch, opt):
    monkeypatch.setattr(jobopts.os, "getuid", lambda: 0)
    e = fail([f"--{opt}=no-such-name-xyz", "--wrap", "true"])
    assert (e.code, e.lines) == (255, [f"sbatch: error: Invalid --{opt} specification"])


def test_nice_out_of_range_has_slurms_message():
    e = fail(["--nice=-2147483646", "--wrap", "true"])
    assert (e.code, e.lines) == (
        255, ["sbatch: error: Invalid --nice value, out of range (+/- 2147483645)"])
    assert req("--nice=-2147483645")["nice"] == -2147483645


# -- --signal ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,expected",
    [
        ("USR1", (10, 60, False)),
        ("SIGUSR1@90", (10, 90, False)),
        ("usr2@0", (12, 0, False)),
        ("B:USR1@90", (10, 90, True)),
        ("R:TERM", (15, 60, False)),
        ("RB:10@65535", (10, 65535, True)),
        ("9", (9, 60, False)),
    ],
)
def test_signal_forms(value, expected):
    s = parse_signal(value)
    assert (s["signal"], s["secs"], s["batch"]) == expected
    assert req("--signal=" + value)["signal"] == s


@pytest.mark.parametrize("value", ["", "BOGUS", "USR1@65536", "USR1@-1", "USR1@x", "X:USR1",
                                   "0", "65", ":USR1", "USR1@"])
def test_signal_invalid(value):
    e = fail(["--signal=" + value, "--wrap", "true"])
    assert (e.lines, e.code) == (["sbatch: error: Invalid --signal specification"], 255)


# -- dependencies --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["afterok:1", "afterok:1:2", "after:5+10", "after:5+10:6", "afterany:3,afternotok:4",
     "afterok:1?afterany:2", "singleton", "aftercorr:7_3", "afterok:7_1", "singleton,afterok:1",
     "12", "12:13"],
)
def test_dependency_ok(value):
    assert check_dependency(value)
    assert req("-d", value)["dependency"] == value


@pytest.mark.parametrize(
    "value",
    ["afterok", "afterok:", "afterok:x", "before:1", "afterok:1,afterany:2?afterok:3",
     "afterok:1+5", "afterok:1,,afterok:2", "singleton:1", "after:1+x"],
)
def test_dependency_bad(value):
    assert not check_dependency(value)
    e = fail(["--dependency=" + value, "--wrap", "true"])
    assert e.lines == ["sbatch: error: Batch job submission failed: Job dependency problem"]
    assert e.code == 1


def test_dependency_unknown_job_is_left_to_controller():
    assert req("--dependency=afterok:999999")["dependency"] == "afterok:999999"


# -- --export ------------------------------------------------------------------------------------

ENV = {"HOME": "/home/a", "PATH": "/bin", "SLURM_CONF": "/etc/slurm.conf", "FOO": "user"}


def test_export_default_all():
    assert run(["--wrap", "true"], env=ENV).env == ENV
    assert run(["--export=ALL", "--wrap", "true"], env=ENV).env == ENV


@pytest.mark.parametrize("value", ["NONE", "NIL", "none"])
def test_export_none(value):
    inv = run(["--export=" + value, "--wrap", "true"], env=ENV)
    assert inv.env == {"SLURM_CONF": "/etc/slurm.conf"}
    assert inv.request["export"] == value


def test_export_list():
    assert build_export_env("A=x,HOME", ENV) == {
        "SLURM_CONF": "/etc/slurm.conf", "A": "x", "HOME": "/home/a"}
    assert build_export_env("MISSING", ENV) == {"SLURM_CONF": "/etc/slurm.conf"}


def test_export_all_plus_list_user_env_wins():
    env = build_export_env("ALL,FOO=given,NEW=1", ENV)
    assert env["FOO"] == "user" and env["NEW"] == "1" and env["PATH"] == "/bin"


def test_export_from_env_var():
    env = dict(ENV, SBATCH_EXPORT="NONE")
    assert set(run(["--wrap", "true"], env=env).env) == {"SLURM_CONF"}


# -- scripts -------------------------------------------------------------------------------------


def test_script_file(tmp_path):
    p = write(tmp_path, "#!/bin/bash\n#SBATCH -J named\necho $1\n")
    inv = run(["job.sh", "a", "-t", "5"], cwd=tmp_path)
    r = inv.request
    assert inv.script == p.read_text()
    assert r["command"] == str(p) and r["script_name"] == "job.sh"
    assert r["argv"] == ["a", "-t", "5"] and r["time_limit"] is None
    assert r["name"] == "named" and r["wrap"] is False
    assert STDIN_CALLS == []


def test_script_stdin():
    inv = run([], stdin=b"#!/bin/sh\n#SBATCH -p debug\ntrue\n")
    assert inv.script == "#!/bin/sh\n#SBATCH -p debug\ntrue\n"
    assert inv.request["partition"] == "debug"
    assert inv.request["command"] is None and inv.request["script_name"] is None
    assert STDIN_CALLS == [SCRIPT_MAX_BYTES + 1]


def test_script_stdin_file_object(tmp_path):
    p = write(tmp_path, "#!/bin/sh\ntrue\n")
    with open(p, "rb") as f:
        inv = parse_sbatch([], {}, f, str(tmp_path), NOW)
    assert inv.script == "#!/bin/sh\ntrue\n"


def test_empty_stdin():
    e = fail([], stdin=b"")
    assert (e.lines, e.code) == (["sbatch: error: Batch script is empty!"], 1)


def test_missing_file():
    e = fail(["/nonexistent/script.sh"])
    assert (e.lines, e.code) == (["sbatch: error: Unable to open file /nonexistent/script.sh"], 1)


def test_directory_as_script(tmp_path):
    e = fail([str(tmp_path)])
    assert e.lines == [f"sbatch: error: Unable to open file {tmp_path}"]


def test_no_shebang(tmp_path):
    write(tmp_path, "echo hi\n", "noshebang.sh")
    e = fail(["noshebang.sh"], cwd=tmp_path)
    assert e.lines == [
        "sbatch: error: This does not look like a batch script.  The first",
        "sbatch: error: line must start with #! followed by the path to an interpreter.",
        "sbatch: error: For instance: #!/bin/sh",
    ]
    assert e.code == 1


def test_whitespace_only(tmp_path):
    write(tmp_path, " \n\t\n")
    e = fail(["job.sh"], cwd=tmp_path)
    assert e.code == 1 and "only whitespace" in e.lines[0]


def test_empty_file(tmp_path):
    write(tmp_path, "")
    assert fail(["job.sh"], cwd=tmp_path).lines == ["sbatch: error: Batch script is empty!"]


def test_nul_bytes(tmp_path):
    write(tmp_path, b"#!/bin/sh\necho \x00hi\n")
    e = fail(["job.sh"], cwd=tmp_path)
    assert e.code == 1 and "NUL" in e.lines[0]


def test_crlf(tmp_path):
    write(tmp_path, b"#!/bin/sh\r\necho hi\r\n")
    e = fail(["job.sh"], cwd=tmp_path)
    assert e.code == 1 and "DOS line breaks" in e.lines[0]


def test_not_utf8(tmp_path):
    write(tmp_path, b"#!/bin/sh\necho \xff\n")
    assert fail(["job.sh"], cwd=tmp_path).code == 1


def test_huge_script_refused_without_reading_it_all(tmp_path, monkeypatch):
    p = tmp_path / "big.sh"
    with open(p, "wb") as f:
        f.write(b"#!/bin/sh\n")
        f.write(b"# filler line\n" * (10 * 1024 * 1024 // 14))
    assert p.stat().st_size > 10_000_000
    sizes = []
    real_open = open

    class Spy:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def read(self, n=-1):
            sizes.append(n)
            return self.f.read(n)

    def spy_open(path, mode="r", *a, **kw):
        f = real_open(path, mode, *a, **kw)
        return Spy(f) if str(path) == str(p) else f

    monkeypatch.setattr("builtins.open", spy_open)
    e = fail([str(p)])
    assert e.code == 1 and "too large" in e.lines[0] and str(SCRIPT_MAX_BYTES) in e.lines[0]
    assert sizes == [SCRIPT_MAX_BYTES + 1]


def test_huge_stdin_refused():
    e = fail([], stdin=b"#!/bin/sh\n" + b"x" * SCRIPT_MAX_BYTES)
    assert "too large" in e.lines[0]


def test_script_at_limit_accepted():
    body = b"#!/bin/sh\n"
    data = body + b"#" * (SCRIPT_MAX_BYTES - len(body))
    assert len(run([], stdin=data).script) == SCRIPT_MAX_BYTES


# -- #SBATCH parsing -----------------------------------------------------------------------------


def test_split_directive():
    assert split_directive(" -J 'a b' --comment=\"x y\" # trailing") == ["-J", "a b", "--comment=x y"]
    assert split_directive(r"--comment=a\ b") == ["--comment=a b"]
    assert split_directive("--comment=a#b") == ["--comment=a#b"]
    assert split_directive('--comment="say \\"hi\\""') == ['--comment=say "hi"']
    assert split_directive("--comment=''") == ["--comment="]
    assert split_directive("   ") == []
    with pytest.raises(ValueError):
        split_directive("--comment='oops")


def test_directive_scanning(tmp_path):
    write(tmp_path, "\n".join([
        "#!/bin/bash",
        "",
        "# a comment",
        "#SBATCH -J first -p debug   # two options on one line",
        "  #SBATCH --account=indented-is-a-comment",
        "#sbatch --account=lowercase-is-a-comment",
        "#SBATCH --time=10",
        "#SBATCH   --comment='with spaces'",
        "echo start",
        "#SBATCH --qos=after-command-ignored",
        "",
    ]))
    r = run(["job.sh"], cwd=tmp_path).request
    assert r["name"] == "first" and r["partition"] == "debug" and r["time_limit"] == 10
    assert r["comment"] == "with spaces"
    assert r["account"] is None and r["qos"] is None


def test_invalid_directive(tmp_path):
    write(tmp_path, "#!/bin/sh\n#SBATCH -J x stray\ntrue\n")
    e = fail(["job.sh"], cwd=tmp_path)
    assert (e.lines, e.code) == (["sbatch: error: Invalid directive found in batch script: stray"], 255)


def test_unknown_option_in_directive(tmp_path):
    write(tmp_path, "#!/bin/sh\n#SBATCH --bogus-option\ntrue\n")
    e = fail(["job.sh"], cwd=tmp_path)
    assert isinstance(e, UsageError)
    assert e.lines[0] == "sbatch: unrecognized option '--bogus-option'" and e.code == 255


def test_bad_value_in_directive(tmp_path):
    write(tmp_path, "#!/bin/sh\n#SBATCH -t abc\ntrue\n")
    e = fail(["job.sh"], cwd=tmp_path)
    assert (e.lines, e.code) == (["sbatch: error: Invalid --time specification"], 255)


def test_unmatched_quote_in_directive(tmp_path):
    write(tmp_path, "#!/bin/sh\n#SBATCH -J 'oops\ntrue\n")
    e = fail(["job.sh"], cwd=tmp_path)
    assert e.code == 255 and "Unmatched quote" in e.lines[0]


def test_slurm_prefix_accepted_with_warning(tmp_path):
    write(tmp_path, "#!/bin/sh\n#SLURM -J old\ntrue\n")
    inv = run(["job.sh"], cwd=tmp_path)
    assert inv.request["name"] == "old"
    assert inv.warnings and inv.warnings[0].startswith("sbatch: error: ")


def test_wrap_in_directive_is_ignored(tmp_path):
    write(tmp_path, "#!/bin/sh\n#SBATCH --wrap=hostname\ntrue\n")
    inv = run(["job.sh"], cwd=tmp_path)
    assert inv.script.endswith("true\n") and inv.request["wrap"] is False


# -- precedence: script < SBATCH_* < command line ------------------------------------------------


def test_precedence(tmp_path):
    write(tmp_path, "#!/bin/sh\n#SBATCH -p script -J script -A script -t 1\ntrue\n")
    env = {"SBATCH_PARTITION": "env", "SBATCH_JOB_NAME": "env"}
    r = run(["-p", "cli", "job.sh"], env=env, cwd=tmp_path).request
    assert r["partition"] == "cli"   # cli beats env and script
    assert r["name"] == "env"        # env beats script
    assert r["account"] == "script"  # only the script
    assert r["time_limit"] == 1


@pytest.mark.parametrize(
    "var,value,key,expected",
    [
        ("SBATCH_ACCOUNT", "acct", "account", "acct"),
        ("SBATCH_ARRAY_INX", "1-3", "array", "1-3"),
        ("SBATCH_TIMELIMIT", "90", "time_limit", 90),
        ("SBATCH_QOS", "high", "qos", "high"),
        ("SBATCH_OUTPUT", "o.txt", "std_out", "o.txt"),
        ("SBATCH_ERROR", "e.txt", "std_err", "e.txt"),
        ("SBATCH_INPUT", "i.txt", "std_in", "i.txt"),
        ("SBATCH_GRES", "gpu:2", "gres", [{"name": "gpu", "type": None, "count": 2}]),
        ("SBATCH_GPUS", "3", "gpus", {"type": None, "count": 3}),
        ("SBATCH_MEM_PER_NODE", "2G", "mem_per_node", 2048),
        ("SBATCH_SIGNAL", "B:USR1@30", "signal", {"signal": 10, "secs": 30, "batch": True}),
        ("SBATCH_OPEN_MODE", "append", "open_mode", "append"),
        ("SBATCH_RESERVATION", "r", "reservation", "r"),
        ("SBATCH_CONSTRAINT", "fast", "constraint", "fast"),
        ("SBATCH_EXCLUSIVE", "user", "exclusive_mode", "user"),
        ("SBATCH_EXCLUSIVE", "", "exclusive", True),
        ("SBATCH_REQUEUE", "1", "requeue", True),
        ("SBATCH_REQUEUE", "0", "requeue", None),
        ("SBATCH_NO_REQUEUE", "yes", "requeue", False),
        ("SBATCH_NO_REQUEUE", "no", "requeue", None),
        ("SBATCH_NO_KILL", "", "no_kill", True),
        ("SBATCH_OVERCOMMIT", "2", "overcommit", True),
    ],
)
def test_env_vars(var, value, key, expected):
    assert req(env={var: value})[key] == expected


def test_env_flag_wait_and_debug():
    inv = run(["--wrap", "true"], env={"SBATCH_WAIT": "yes", "SBATCH_DEBUG": "2"})
    assert inv.wait is True and inv.verbose == 2
    assert run(["--wrap", "true"], env={"SBATCH_WAIT": "off"}).wait is False


def test_env_bad_value():
    e = fail(["--wrap", "true"], env={"SBATCH_TIMELIMIT": "abc"})
    assert (e.lines, e.code) == (["sbatch: error: Invalid --time specification"], 255)


def test_getopt_errors_before_script_errors():
    e = fail(["--bogus-option", "/nonexistent/script.sh"])
    assert e.lines[0] == "sbatch: unrecognized option '--bogus-option'"


def test_script_errors_before_value_errors():
    e = fail(["-t", "abc", "/nonexistent/script.sh"])
    assert e.lines == ["sbatch: error: Unable to open file /nonexistent/script.sh"]
