"""srun's launch and I/O, step side, against Slurm 22.05.8 (issue 19): real cluster, real
srun, real step daemons and tasks.

* ``srun -v``: Slurm's launch lines (tests/data/slurm-ref/srun_v_*.txt, captured from the
  reference Slurm) line for line, job/step ids and node names aside;
* ``--multi-prog``: per-task programs, ``%t``/``%o``, quoting, and Slurm's error lines
  (srun_multi_prog_errors.txt);
* ``--task-prolog``/``--task-epilog``: run as the user around each task, TaskProlog's
  ``print``/``export``/``unset``, Slurm's failure lines and exit codes;
* ``--error=none``, ``--output=none``, ``--output=N``, ``--input=N``/``none``,
  SLURM_STDOUTMODE/SLURM_STDERRMODE/SLURM_STDINMODE;
* resource limits: ``ulimit -c 943`` outside is 943 inside, ``--propagate`` and slurm.conf's
  PropagateResourceLimitsExcept choose, and a forged limit above the node's hard limit is
  lowered to it (a hostile user's srun gains nothing);
* SLURM_LAUNCH_NODE_IPADDR and SLURM_SRUN_COMM_HOST in every task.
"""

import os
import pathlib
import re
import resource
import subprocess
import sys

import pytest

from cluster import TEST_USER, private_cluster, user_exists, wait_for

REF = pathlib.Path(__file__).resolve().parents[1] / "data" / "slurm-ref"


@pytest.fixture(scope="module")
def c():
    # NOFILE is not propagated unless srun asks for it (--propagate=NOFILE)
    with private_cluster("mparity", nodes=2, gpus=0, cpus=4,
                         extra_conf="PropagateResourceLimitsExcept=NOFILE") as cl:
        yield cl


def srun(c, *args, env=None, input=None, user=None, preexec=None):
    e = dict(c.env)
    e.update(env or {})
    return subprocess.run(["srun", *args], capture_output=True, text=True, env=e, input=input,
                          cwd=c.workdir, timeout=60, preexec_fn=preexec,
                          user=user, group=user, extra_groups=[] if user else None)


def ref_lines(name: str) -> list[str]:
    return [ln for ln in (REF / name).read_text().splitlines() if not ln.startswith("#")]


def shape(line: str) -> str:
    """A line with its job id, step id and node names replaced: what both clusters share."""
    line = re.sub(r"jobid \d+", "jobid J", line)
    line = re.sub(r"StepId=\d+\.\d+", "StepId=J.S", line)
    return re.sub(r"node\[?[0-9,-]+\]?", "NODE", line)


# ---- srun -v ---------------------------------------------------------------------------------

def test_verbose_one_node_matches_slurm(c):
    r = srun(c, "-v", "-N1", "true")
    assert r.returncode == 0, r.stderr
    assert [shape(ln) for ln in r.stderr.splitlines()] == \
        [shape(ln) for ln in ref_lines("srun_v_N1_true.txt")]


def test_verbose_two_nodes_failing_tasks(c):
    """Slurm's lines for -N2 -n3 whose tasks exit with their rank: the same lines (the order
    of the two nodes' start and exit lines is the nodes' timing, in both systems), and the
    same exit code."""
    r = srun(c, "-v", "-N2", "-n3", "sh", "-c", "exit $SLURM_PROCID")
    assert r.returncode == 2, r.stderr
    got = r.stderr.splitlines()
    want = ref_lines("srun_v_N2_n3_exit.txt")
    assert sorted(map(shape, got)) == sorted(map(shape, want))
    job = re.search(r"^srun: jobid (\d+): nodes\(2\):`node\[1-2\]', cpu counts: 2\(x1\),1\(x1\)$",
                    r.stderr, re.M)
    assert job, r.stderr
    launching = [ln for ln in got if " launching " in ln]
    assert launching == [f"srun: launching StepId={job.group(1)}.0 on host node1, 2 tasks: [0-1]",
                         f"srun: launching StepId={job.group(1)}.0 on host node2, 1 tasks: 2"]
    # the header comes first, the launch lines before any task line
    assert got.index(launching[0]) < min(i for i, ln in enumerate(got) if "_task_" in ln)


def test_no_launch_lines_without_v(c):
    r = srun(c, "-N1", "true")
    assert (r.returncode, r.stderr) == (0, "")


def test_vv_shows_the_limits_sent(c):
    r = srun(c, "-vv", "-N1", "true", preexec=lambda: resource.setrlimit(
        resource.RLIMIT_CORE, (943 * 1024, resource.getrlimit(resource.RLIMIT_CORE)[1])))
    assert r.returncode == 0, r.stderr
    assert f"srun: debug:  propagating RLIMIT_CORE={943 * 1024}\n" in r.stderr


# ---- --multi-prog ----------------------------------------------------------------------------

def write(c, name: str, text: str) -> str:
    path = os.path.join(c.workdir, name)
    with open(path, "w") as fh:
        fh.write(text)
    return path


def test_multi_prog_runs_one_program_per_task(c):
    write(c, "mp.conf", "# comment\n0      echo first %t %o\n1-2    echo range %t %o\n"
                        "*      echo rest %t %o\n")
    r = srun(c, "-n5", "-l", "--multi-prog", "mp.conf")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0: first 0 0", "1: range 1 0", "2: range 2 1",
                                             "3: rest 3 3", "4: rest 4 4"]


def test_multi_prog_task_count_and_quoting(c):
    """Without -n the file's highest task id sets the count (3 here, over two nodes); single
    quotes and a backslash keep blanks, double quotes do not (Slurm 22.05's parsing)."""
    write(c, "n.conf", "0 printf '[%s]' \"a   b\" 'c  d' e\\ f\n1-2 echo b %o\n")
    r = srun(c, "-l", "-N2", "--multi-prog", "n.conf")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ['0: ["a][b"][c  d][e f]', "1: b 0", "2: b 1"]


def test_multi_prog_errors_match_slurm(c):
    """Each case of srun_multi_prog_errors.txt: the file given to Slurm, its stderr, exit 1 —
    before any allocation (no job is created)."""
    cases = re.findall(r"^== (\S+)\n(.*?)-- stderr\n(.*?)(?=^== |\Z)",
                       (REF / "srun_multi_prog_errors.txt").read_text(), re.M | re.S)
    assert len(cases) == 6
    before = c.run(["sacct", "-X", "-n", "-P", "-o", "JobID"]).out
    for name, content, stderr in cases:
        if name != "nonexist.conf":
            write(c, name, content)
        r = srun(c, "-n2", "--multi-prog", name)
        assert (r.returncode, r.stderr) == (1, stderr), name
    assert c.run(["sacct", "-X", "-n", "-P", "-o", "JobID"]).out == before


# ---- --task-prolog / --task-epilog ---------------------------------------------------------------

def script(c, name: str, body: str) -> str:
    path = write(c, name, "#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    return path


@pytest.mark.skipif(not user_exists(TEST_USER), reason=f"needs the test user {TEST_USER}")
def test_task_prolog_and_epilog_run_as_the_user(c):
    prolog = script(c, "tp.sh", 'echo "print prolog says $SLURM_PROCID as $(id -un)"\n'
                                'echo "export FOO=bar baz"\necho "unset HOME"\necho "junk"\n'
                                'echo "to stderr" >&2\n')
    log = os.path.join(c.workdir, "te.log")
    epilog = script(c, "te.sh", f'echo "epilog $SLURM_PROCID $(id -un) ${{FOO-}} '
                                f'$SLURM_SCRIPT_CONTEXT" >> {log}\n')
    r = srun(c, "-l", "-n2", f"--task-prolog={prolog}", f"--task-epilog={epilog}", "sh", "-c",
             'echo "FOO=$FOO HOME=${HOME-unset}"', user=TEST_USER)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0: FOO=bar baz HOME=unset",
                                             f"0: prolog says 0 as {TEST_USER}",
                                             "1: FOO=bar baz HOME=unset",
                                             f"1: prolog says 1 as {TEST_USER}"]
    assert "to stderr" not in r.stderr
    # the epilog runs after each task, without the prolog's exports, as Slurm's (the step
    # daemon runs it once the tasks have ended: srun may be gone by then)
    def epilog_lines():
        return sorted(open(log).read().splitlines()) if os.path.exists(log) else []
    wait_for(lambda: len(epilog_lines()) == 2, 15, what="both task epilogs")
    assert epilog_lines() == [f"epilog 0 {TEST_USER}  epilog_task",
                              f"epilog 1 {TEST_USER}  epilog_task"]


def test_task_prolog_failures_as_slurm(c):
    fail = script(c, "tpf.sh", "exit 3\n")
    r = srun(c, "-n1", f"--task-prolog={fail}", "echo", "hi")
    assert (r.returncode, r.stdout) == (3, "")
    assert r.stderr == ("slurmstepd-node1: error: --task-prolog failed status=3\n"
                        "srun: error: node1: task 0: Exited with exit code 3\n")
    missing = os.path.join(c.workdir, "nonexist.sh")
    for path, why in ((missing, f"can not be executed ({missing}) No such file or directory"),
                      ("tp.sh", "is not fully qualified pathname (tp.sh)")):
        r = srun(c, "-n1", f"--task-prolog={path}", "echo", "hi")
        assert (r.returncode, r.stdout) == (1, ""), r.stderr
        assert f"slurmstepd-node1: error: run_command: user task_prolog {why}\n" \
               "slurmstepd-node1: error: user task_prolog did not exit normally. reason: Run " \
               "command failed - configuration error\n" \
               "slurmstepd-node1: error: --task-prolog failed status=1\n" in r.stderr


# ---- -o/-e/-i none and task ids --------------------------------------------------------------------

OUT_ERR = ["sh", "-c", "echo out$SLURM_PROCID; echo err$SLURM_PROCID >&2"]


def test_error_and_output_none(c):
    r = srun(c, "-n1", "--error=none", *OUT_ERR)
    assert (r.returncode, r.stdout, r.stderr) == (0, "out0\n", "")
    r = srun(c, "-n1", "--output=none", *OUT_ERR)  # stderr follows stdout, as in Slurm
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = srun(c, "-l", "-n2", "--output=1", *OUT_ERR)  # only task 1's streams reach srun
    assert (r.returncode, r.stdout, r.stderr) == (0, "1: out1\n", "1: err1\n")


def test_io_mode_variables(c):
    r = srun(c, "-n1", *OUT_ERR, env={"SLURM_STDOUTMODE": "none"})
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = srun(c, "-n1", *OUT_ERR, env={"SLURM_STDERRMODE": "none"})
    assert (r.returncode, r.stdout, r.stderr) == (0, "out0\n", "")
    r = srun(c, "-n1", "cat", env={"SLURM_STDINMODE": "none"}, input="hi\n")
    assert (r.returncode, r.stdout) == (0, "")
    r = srun(c, "-n1", "-o", "out-%t.txt", *OUT_ERR, env={"SLURM_STDOUTMODE": "none"})
    assert r.stdout == "" and open(os.path.join(c.workdir, "out-0.txt")).read() == "out0\nerr0\n"


def test_input_to_one_task(c):
    cmd = ["sh", "-c", "cat; echo end"]
    r = srun(c, "-l", "-n2", "--input=1", *cmd, input="hello\n")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0: end", "1: end", "1: hello"]
    r = srun(c, "-l", "-n2", "--input=none", *cmd, input="hello\n")
    assert sorted(r.stdout.splitlines()) == ["0: end", "1: end"]
    r = srun(c, "-l", "-n2", "--input=all", *cmd, input="hello\n")
    assert sorted(r.stdout.splitlines()) == ["0: end", "0: hello", "1: end", "1: hello"]


# ---- resource limits ---------------------------------------------------------------------------

def soft(res: int, value: int):
    return lambda: resource.setrlimit(res, (value, resource.getrlimit(res)[1]))


def test_core_limit_propagates(c):
    """``ulimit -c 943`` (KiB) outside: 943 KiB inside (dash counts 512-byte blocks); with
    --propagate=NONE the node's own limit stays."""
    show = ["sh", "-c", "echo $(( $(ulimit -c) / 2 ))"]
    r = srun(c, "-n1", *show, preexec=soft(resource.RLIMIT_CORE, 943 * 1024))
    assert (r.returncode, r.stdout) == (0, "943\n"), r.stderr
    r = srun(c, "-n1", "--propagate=NONE", "sh", "-c", "ulimit -c",
             preexec=soft(resource.RLIMIT_CORE, 943 * 1024))
    node_core = resource.getrlimit(resource.RLIMIT_CORE)[0]  # the agent's, inherited from here
    assert r.stdout.strip() == ("unlimited" if node_core == resource.RLIM_INFINITY
                                else str(node_core // 512))


def test_propagate_except_and_explicit(c):
    """slurm.conf's PropagateResourceLimitsExcept=NOFILE keeps the node's NOFILE; srun's
    --propagate=NOFILE asks for it and gets it; an unknown name is Slurm's error."""
    node = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    r = srun(c, "-n1", "sh", "-c", "ulimit -n", preexec=soft(resource.RLIMIT_NOFILE, 1000))
    assert (r.returncode, r.stdout) == (0, f"{node}\n"), r.stderr
    r = srun(c, "-n1", "--propagate=NOFILE,CORE", "sh", "-c", "ulimit -n",
             preexec=soft(resource.RLIMIT_NOFILE, 1000))
    assert (r.returncode, r.stdout) == (0, "1000\n"), r.stderr
    r = srun(c, "-n1", "--propagate=BOGUS", "true")
    assert (r.returncode, r.stderr) == (1, "srun: error: Bad rlimit name: BOGUS\n"
                                           "srun: error: --propagate=BOGUS is not valid.\n")


FORGED_SRUN = """
import sys
from muster.common import rlimits
real = rlimits.capture
rlimits.capture = lambda: {**real(), "NOFILE": 1 << 40, "NPROC": rlimits.UNLIMITED}
from muster.cli import srun
sys.argv = ["srun", *sys.argv[1:]]
srun.main()
"""


@pytest.mark.skipif(not user_exists(TEST_USER), reason=f"needs the test user {TEST_USER}")
def test_forged_limits_stop_at_the_node_hard_limit(c):
    """A hostile user's srun claims limits above the node's hard limits: the tasks get the
    node's hard limits, no more, and the explicitly requested one is reported as Slurm
    logs it."""
    hard_n = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard_p = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    r = subprocess.run([sys.executable, "-c", FORGED_SRUN, "-n1", "--propagate=NOFILE,NPROC",
                        "sh", "-c", "ulimit -n; ulimit -Hn; ulimit -p"], capture_output=True,
                       text=True, env=c.env, cwd=c.workdir, timeout=60, user=TEST_USER,
                       group=TEST_USER, extra_groups=[])
    assert r.returncode == 0, r.stderr
    want_p = "unlimited" if hard_p == resource.RLIM_INFINITY else str(hard_p)
    assert r.stdout.splitlines() == [str(hard_n), str(hard_n), want_p]
    assert (f"slurmstepd-node1: error: Can't propagate RLIMIT_NOFILE of {1 << 40} from "
            "submit host: Operation not permitted\n") in r.stderr


# ---- task environment --------------------------------------------------------------------------

def test_launch_node_address_in_every_task(c):
    r = srun(c, "-l", "-N2", "-n4", "sh", "-c",
             'echo "$SLURM_LAUNCH_NODE_IPADDR $SLURM_SRUN_COMM_HOST $SLURM_SRUN_COMM_PORT"')
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines())
    assert len(lines) == 4
    for t, line in enumerate(lines):
        ip, host, port = line.split(": ", 1)[1].split(" ")
        # srun's address as the step daemons reach it: loopback for this local cluster
        assert (line.startswith(f"{t}: "), ip, host, port.isdigit()) == \
            (True, "127.0.0.1", "127.0.0.1", True)
