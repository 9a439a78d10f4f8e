"""Pure parts of srun's launch side (issue 19): --multi-prog's file, the limits' shell lines
(run in a real /bin/sh under a lowered hard limit), srun -v's formats, the user's
--task-prolog check (run in a real /bin/sh)."""

import resource
import subprocess

import pytest

from muster.agent import taskprolog
from muster.cli import multiprog, srunlog
from muster.common import rlimits


def test_multi_prog_records():
    text = "# c\n0 echo a %t\n1-2,4 echo b %o\\\n x\n* 'q %t' \\%t %s\n"
    argv = multiprog.parse(text, "f", 5)
    assert argv == {0: ["echo", "a", "0"], 1: ["echo", "b", "0", "x"], 2: ["echo", "b", "1", "x"],
                    4: ["echo", "b", "2", "x"], 3: ["q %t", "%t", ""]}
    assert multiprog.task_count(text) == 5 and multiprog.task_count("* true\n") == 1


@pytest.mark.parametrize("text, lines", [
    ("0 a\n0 b\n", "Duplicate record for task 0\nLine 2 of configuration file f invalid"),
    ("0 a\n", "Configuration file f invalid, no record for task id 1"),
    ("0-5 a\n", "Invalid task id, 5 >= ntasks\nLine 1 of configuration file f invalid"),
    ("2-1 a\n", "Invalid task range specification (2-1)\nLine 1 of configuration file f invalid"),
    ("0 a\n1\n", "Line 2 of configuration file f invalid"),
])
def test_multi_prog_errors(text, lines):
    with pytest.raises(multiprog.MultiProgError) as ei:
        multiprog.parse(text, "f", 2)
    assert str(ei.value) == lines


def test_propagate_names():
    assert rlimits.parse_list("core,RLIMIT_NOFILE") == {"CORE", "NOFILE"}
    assert rlimits.parse_list(None) == set(rlimits.NAMES)
    assert rlimits.parse_list("NONE") == set()
    with pytest.raises(ValueError, match="Bad rlimit name: X"):
        rlimits.parse_list("CORE,X")
    assert rlimits.selected(None, "ALL", "NOFILE,CORE") == set(rlimits.NAMES) - {"NOFILE", "CORE"}
    assert rlimits.selected("CORE", "NONE", None) == {"CORE"}
    assert rlimits.clean({"CORE": 1, "NOFILE": -1, "BOGUS": 2, "AS": True}) == {"CORE": 1}


def _lower_nofile(hard: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def test_limit_lines_stop_at_the_hard_limit():
    """Lines built with a hard limit the shell really has: a value above it becomes it (with
    Slurm's line when asked for explicitly); the shell can never go above it."""
    lines = rlimits.shell_lines({"NOFILE": 5000, "CORE": 943 * 1024}, {"NOFILE": 300},
                                frozenset({"NOFILE"}), "n1")
    r = subprocess.run(["/bin/sh", "-c", lines + "ulimit -n; ulimit -Hn; ulimit -c"],
                       capture_output=True, text=True, preexec_fn=_lower_nofile(300))
    assert r.stdout.split() == ["300", "300", str(943 * 2)]
    assert r.stderr == ("slurmstepd-n1: error: Can't propagate RLIMIT_NOFILE of 5000 from "
                        "submit host: Operation not permitted\n")
    # a hard limit the lines were not told about: the shell's ulimit refuses, quietly
    lines = rlimits.shell_lines({"NOFILE": 5000}, {}, frozenset(), "n1")
    r = subprocess.run(["/bin/sh", "-c", lines + "ulimit -n"], capture_output=True, text=True,
                       preexec_fn=_lower_nofile(300))
    assert (r.stdout, r.stderr) == ("300\n", "")


def test_verbose_formats():
    assert srunlog.cpu_counts([2, 2, 1, 2]) == "2(x2),1(x1),2(x1)"
    assert srunlog.task_ids([2]) == "2" and srunlog.task_ids([3, 0, 1]) == "[0-1,3]"
    assert srunlog.wait_status({"exit_code": 2, "signal": 0}) == 0x200
    assert srunlog.wait_status({"exit_code": 0, "signal": 9}) == 9


def test_user_task_prolog_check_in_a_real_shell(tmp_path):
    wrapper = taskprolog.with_user_task_prolog('exec "$0" "$@"', "rel.sh", "n1")
    r = subprocess.run(["/bin/sh", "-c", wrapper, "echo", "hi"], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.splitlines() == [
        "slurmstepd-n1: error: run_command: user task_prolog is not fully qualified pathname "
        "(rel.sh)",
        "slurmstepd-n1: error: user task_prolog did not exit normally. reason: Run command "
        "failed - configuration error",
        "slurmstepd-n1: error: --task-prolog failed status=1"]
    prolog = tmp_path / "p.sh"
    prolog.write_text("#!/bin/sh\necho 'export X=1 2'\necho 'print hello'\n")
    prolog.chmod(0o755)
    wrapper = taskprolog.with_user_task_prolog('exec "$0" "$@"', str(prolog), "n1")
    r = subprocess.run(["/bin/sh", "-c", wrapper, "sh", "-c", 'echo "X=$X"'],
                       capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (0, "hello\nX=1 2\n", "")
