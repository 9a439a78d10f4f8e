"""--help, --usage and --version of every command, run as real processes (issue 19).

The option lists come from the commands' own parsers, so a parser that gains an option the
help does not show fails here. Layout facts are Slurm 22.05.8's (the installed /usr/bin
commands printed them): exit 0, the ``Usage:`` line, the sections.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from muster import SLURM_COMPAT_VERSION
from muster.common import fmt_json

BIN = os.path.dirname(sys.executable)
SLURM_CMDS = ["sbatch", "srun", "salloc", "squeue", "scancel", "sinfo", "scontrol", "sacct",
              "sacctmgr", "sprio", "sshare", "sstat", "sdiag"]


def run(cmd: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    return subprocess.run([os.path.join(BIN, cmd), *args], capture_output=True, text=True,
                          env=env, timeout=30)


def parser_specs(cmd: str) -> list:
    if cmd == "sbatch":
        from muster.cli.jobopts import SBATCH_PARSER
        return SBATCH_PARSER.specs
    if cmd in ("srun", "salloc"):
        from muster.cli import srun
        return srun._parser(cmd)[0].specs
    import importlib
    return importlib.import_module(f"muster.cli.{cmd}").PARSER.specs


@pytest.mark.parametrize("cmd", SLURM_CMDS)
def test_every_parser_option_is_in_the_help(cmd):
    r = run(cmd, "--help")
    assert r.returncode == 0 and r.stderr == ""
    missing = []
    for spec in parser_specs(cmd):
        if spec.longs and not any(re.search(rf"--{re.escape(n)}(?![\w-])", r.stdout)
                                  for n in spec.longs):
            missing.append("--" + spec.longs[0])
        if spec.short and not re.search(rf"(?<![\w-])-{spec.short}(?![\w-])", r.stdout):
            missing.append("-" + spec.short)
    assert missing == [], f"{cmd} --help lacks {missing}"


FIRST_LINES = {
    "sbatch": "Usage: sbatch [OPTIONS(0)...] [ : [OPTIONS(N)...]] script(0) [args(0)...]",
    "srun": "Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]] [ : [OPTIONS(N)...]] "
            "executable(N) [args(N)...]",
    "salloc": "Usage: salloc [OPTIONS(0)...] [ : [OPTIONS(N)]] [command(0) [args(0)...]]",
    "squeue": "Usage: squeue [OPTIONS]", "sinfo": "Usage: sinfo [OPTIONS]",
    "scancel": "Usage: scancel [OPTIONS] [job_id[_array_id][.step_id]]",
    "sprio": "Usage: sprio [OPTIONS]", "sshare": "Usage:  sshare [OPTION]",
    "sstat": "sstat [<OPTION>] -j <job(.stepid)>", "sacct": "sacct [<OPTION>]",
    "scontrol": "scontrol [<OPTION>] [<COMMAND>]", "sacctmgr": "sacctmgr [<OPTION>] [<COMMAND>]",
    "sdiag": "Usage: sdiag [OPTIONS]",
}
USAGE_FIRST = {
    "sbatch": "Usage: sbatch [-N nnodes] [-n ntasks]",
    "srun": "Usage: srun [-N nnodes] [-n ntasks] [-i in] [-o out] [-e err]",
    "salloc": "Usage: salloc [-N numnodes|[min nodes]-[max nodes]] [-n num-processors]",
    "squeue": "Usage: squeue [-A account] [--clusters names] [-i seconds] [--job jobid]",
    "sinfo": "Usage: sinfo [-abdelNRrsTv] [-i seconds] [-t states] [-p partition] [-n nodes]",
    "scancel": "Usage: scancel [-A account] [--batch] [--full] [--interactive] [-n job_name]",
    "sprio": "Usage: sprio [-j jid[s]] [-u user_name[s]] [-o format] [-p partitions]",
    "sacct": "Usage: sacct [options]", "sstat": "Usage: sstat [options] -j <job(.stepid)>",
    "sdiag": "Usage: sdiag [-M cluster] [-aritT]",
}


@pytest.mark.parametrize("cmd", SLURM_CMDS)
def test_help_and_usage_layout(cmd):
    h = run(cmd, "--help")
    u = run(cmd, "--usage")
    assert (h.returncode, u.returncode) == (0, 0)
    assert h.stdout.splitlines()[0].rstrip() == FIRST_LINES[cmd]
    if cmd in USAGE_FIRST:
        assert u.stdout.splitlines()[0] == USAGE_FIRST[cmd]
        assert u.stdout != h.stdout
    else:  # scontrol, sacctmgr and sshare answer --usage with their help, as Slurm's do
        assert u.stdout == h.stdout
    if cmd in ("sbatch", "srun", "salloc"):
        for title in ("Parallel run options:", "Constraint options:", "GPU scheduling options:",
                      "Help options:", "Other options:"):
            assert f"\n{title}\n" in h.stdout
        # the description column is Slurm's (column 30)
        assert re.search(r"^  -N, --nodes=N {15}\S", h.stdout, re.M)
        assert u.stdout.rstrip().endswith("[args...]]" if cmd == "salloc" else "[args...]")


@pytest.mark.parametrize("cmd", SLURM_CMDS)
def test_version(cmd):
    for opt in ("--version", "-V"):
        r = run(cmd, opt)
        assert r.returncode == 0 and r.stderr == ""
        assert r.stdout == f"slurm {SLURM_COMPAT_VERSION}\n"
        assert re.fullmatch(r"slurm (\d+)\.(\d+)\.(\d+)\n", r.stdout)
    # the JSON meta reports the same release
    assert fmt_json.SLURM_RELEASE == SLURM_COMPAT_VERSION
    major, minor, micro = SLURM_COMPAT_VERSION.split(".")
    assert fmt_json.SLURM_VERSION == {"major": major, "minor": minor, "micro": micro}


def test_scontrol_version_command():
    r = run("scontrol", "version")
    assert (r.returncode, r.stdout) == (0, f"slurm {SLURM_COMPAT_VERSION}\n")


@pytest.mark.parametrize("cmd", ["sbatch", "srun", "squeue", "scontrol"])
def test_first_info_option_wins(cmd):
    """Slurm's getopt loop exits at the first of --help/--usage/--version."""
    a = run(cmd, "--version", "--help")
    b = run(cmd, "--help", "--version")
    assert a.stdout == f"slurm {SLURM_COMPAT_VERSION}\n"
    assert b.stdout.splitlines()[0].rstrip() == FIRST_LINES[cmd]
    c = run(cmd, "--help", "--bogus-option")  # seen after the exit: no error
    assert (c.returncode, c.stderr) == (0, "")


def test_sacct_sstat_version_beats_help_and_last_of_help_usage_wins():
    for cmd in ("sacct", "sstat"):
        assert run(cmd, "--help", "--version").stdout == f"slurm {SLURM_COMPAT_VERSION}\n"
        assert run(cmd, "--help", "--usage").stdout.startswith("Usage: ")
        assert run(cmd, "--usage", "--help").stdout.splitlines()[0].rstrip() == \
            FIRST_LINES[cmd]


# (command, exit code, hint line printed) for an unknown option: Slurm 22.05.8's
BOGUS = [("sbatch", 255, True), ("srun", 255, True), ("salloc", 255, True),
         ("squeue", 1, True), ("sinfo", 1, True), ("scancel", 1, True), ("scontrol", 1, True),
         ("sacctmgr", 1, True), ("sprio", 1, True), ("sshare", 1, True), ("sacct", 1, False),
         ("sstat", 1, False), ("sdiag", 1, True)]


@pytest.mark.parametrize("cmd,code,hint", BOGUS)
def test_unrecognized_option(cmd, code, hint):
    r = run(cmd, "--bogus-option")
    lines = [f"{cmd}: unrecognized option '--bogus-option'"]
    if hint:
        lines.append(f'Try "{cmd} --help" for more information')
    assert (r.returncode, r.stdout, r.stderr.splitlines()) == (code, "", lines)


def test_seff_keeps_its_contrib_behaviour():
    for opt in ("-h", "-v"):
        r = run("seff", opt)
        assert r.returncode == 1
    assert run("seff", "-v").stdout == "seff Version 2.1\n"
    h = run("seff", "-h").stdout
    assert h.startswith("Usage: seff [Options] <Jobid>\n") and "-d    Debug mode" in h
    assert run("seff").stdout == h
