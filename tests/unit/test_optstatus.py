"""Every sbatch/srun/salloc option has a status (docs/options.md) and the commands act on it."""

from __future__ import annotations

import pathlib

import pytest

from muster.cli import optdocs, optstatus
from muster.cli.getopt import CliExit
from muster.cli.jobopts import parse_sbatch

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "options.md"


def _longs(command: str) -> set[str]:
    return {s.long or s.short for s in optdocs.parser_specs(command)}


@pytest.mark.parametrize("command", optstatus.COMMANDS)
def test_every_parser_option_has_a_status(command):
    missing = sorted(o for o in _longs(command) if optstatus.lookup(command, o) is None)
    assert not missing, f"{command} options without a row in muster.cli.optstatus: {missing}"


def test_every_status_names_an_option_some_parser_has():
    known = set().union(*(_longs(c) for c in optstatus.COMMANDS))
    stale = sorted(set(optstatus.STATUS) - known)
    assert not stale, f"optstatus rows for options no parser has: {stale}"
    for opt, st in optstatus.STATUS.items():
        per = st if isinstance(st, dict) else {c: st for c in optstatus.COMMANDS}
        for command, (status, note) in per.items():
            assert command in optstatus.COMMANDS
            assert status in (optstatus.H, optstatus.W, optstatus.R, optstatus.I), opt
            if status != optstatus.H:
                assert note, f"--{opt} ({command}) is {status} without a reason"


def test_docs_table_is_current():
    assert DOC.read_text() == optdocs.render(), \
        "docs/options.md is stale: python -m muster.cli.optdocs > docs/options.md"


def _sbatch(argv):
    return parse_sbatch(argv + ["--wrap", "true"], {}, None, "/tmp", 1_700_000_000)


def test_sbatch_warns_about_what_it_cannot_honour():
    inv = _sbatch(["--sockets-per-node=2", "--hint=nomultithread", "--ignore-pbs",
                   "--sockets-per-node=3", "-C", "a100"])
    assert inv.warnings == [
        "sbatch: warning: --sockets-per-node is not supported by Muster: Muster allocates CPUs, "
        "not sockets, cores or threads; ignored",
        "sbatch: warning: --hint is not supported by Muster: Muster allocates CPUs, not "
        "sockets, cores or threads; ignored",
    ]
    assert inv.request["constraint"] == "a100"
    assert _sbatch(["--exclusive=user"]).warnings == [
        "sbatch: warning: --exclusive=user is not supported by Muster: the job gets whole nodes"]


@pytest.mark.parametrize("opt", ["--bb=x", "--bbf=/tmp/x", "--test-only"])
def test_sbatch_refuses_what_would_change_the_job(opt):
    with pytest.raises(CliExit) as ei:
        _sbatch([opt])
    assert ei.value.code == 1 and ei.value.lines[0].startswith(
        f"sbatch: error: {opt.split('=')[0]} is not supported by Muster: ")


def test_sbatch_container_options_go_to_the_environment():
    import json
    env = _sbatch(["--container=/b/bundle"]).env
    assert json.loads(env["MUSTER_CONTAINER"]) == {"bundle": "/b/bundle"}
    assert env["SLURM_CONTAINER"] == "/b/bundle"
    env = _sbatch(["--container-image=/i.tar", "--container-mounts=/a:/b:ro,/c",
                   "--container-workdir=/w", "--container-name=n1"]).env
    assert json.loads(env["MUSTER_CONTAINER"]) == {
        "image": "/i.tar", "mounts": [["/a", "/b", "ro"], ["/c", "/c", ""]], "workdir": "/w",
        "name": "n1", "mount_home": False, "remap_root": False}
    for bad in (["--container-mounts=/a"], ["--container=/b", "--container-image=/i"],
                ["--container-image=/i", "--container-mounts=rel:/x"]):
        with pytest.raises(CliExit) as ei:
            _sbatch(bad)
        assert ei.value.code != 0 and ei.value.lines[0].startswith("sbatch: error: "), bad


def test_sbatch_step_options_go_to_the_environment(tmp_path):
    env_file = tmp_path / "env"
    env_file.write_text("A=1\nB=two words\n")
    nodes = tmp_path / "nodes"
    nodes.write_text("n1\nn2\n")
    inv = _sbatch(["--gpu-bind=single:1", "-m", "cyclic", f"--export-file={env_file}",
                   "-F", str(nodes), "--mail-type=end,begin", "--mail-user=bob"])
    assert inv.env["SLURM_GPU_BIND"] == "single:1" and inv.env["SLURM_DISTRIBUTION"] == "cyclic"
    assert (inv.env["A"], inv.env["B"]) == ("1", "two words")
    assert inv.request["nodelist"] == "n1,n2"
    assert (inv.request["mail_type"], inv.request["mail_user"]) == ("BEGIN,END", "bob")
    for bad in (["--gpu-bind=bogus"], ["--mail-type=SOMETIMES"], ["--mail-user=-x"]):
        with pytest.raises(CliExit) as ei:
            _sbatch(bad)
        assert ei.value.code == 255


def test_srun_and_salloc_warn_and_refuse(capsys):
    from muster.cli import srun
    inv = srun.parse(["--mem-bind=local", "-n2", "true"], {}, "/tmp")
    assert inv.req["ntasks"] == 2
    assert capsys.readouterr().err == ("srun: warning: --mem-bind is not supported by Muster: "
                                       "no NUMA memory binding; ignored\n")
    inv = srun.parse(["--cpu-bind=verbose,cores", "true"], {}, "/tmp")  # honoured: no warning
    assert inv.srun["cpu_bind"] == "verbose,cores" and capsys.readouterr().err == ""
    with pytest.raises(CliExit) as ei:
        srun.parse(["--cpu-bind=bogus", "true"], {}, "/tmp")
    assert ei.value.lines == ['srun: error: unrecognized --cpu-bind argument "bogus"']
    srun.parse(["--label", "true"], {}, "/tmp", prog="salloc")
    assert "salloc: warning: --label is not supported by Muster: srun option" in \
        capsys.readouterr().err
    with pytest.raises(CliExit) as ei:
        srun.parse(["--no-allocate", "true"], {}, "/tmp")
    assert ei.value.lines == ["srun: error: --no-allocate is not supported by Muster: "
                              "not supported"]
