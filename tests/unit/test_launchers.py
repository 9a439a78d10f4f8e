"""The Slurm commands are installed from bin/ (pyproject's ``script-files``), not as entry points:
pip's entry-point wrapper imports ``re`` and ``enum`` on every call. Every launcher must run its
``muster.cli`` module's ``main``, every command module must have a launcher, and starting one
must import nothing the command itself does not (``re``, ``enum``: the wrapper's)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _pyproject() -> dict:
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:
        return tomllib.load(fh)


def _launchers() -> list[str]:
    return _pyproject()["tool"]["setuptools"]["script-files"]


def test_each_launcher_runs_its_command_main():
    files = _launchers()
    assert files
    entry_points = _pyproject()["project"]["scripts"]
    for rel in files:
        name = os.path.basename(rel)
        path = os.path.join(REPO, rel)
        assert os.access(path, os.X_OK), f"{rel} is not executable"
        with open(path) as fh:
            text = fh.read()
        assert text.startswith("#!python\n"), f"{rel}: pip rewrites only a '#!python' line"
        imported = [(n.module, [a.name for a in n.names]) for n in ast.walk(ast.parse(text))
                    if isinstance(n, ast.ImportFrom)]
        assert imported == [(f"muster.cli.{name}", ["main"])], rel
        assert os.path.exists(os.path.join(REPO, "src", "muster", "cli", f"{name}.py")), rel
        assert name not in entry_points, f"{name} is both a launcher and an entry point"


def test_every_slurm_command_module_has_a_launcher():
    names = {os.path.basename(p) for p in _launchers()}
    cli = os.path.join(REPO, "src", "muster", "cli")
    commands = set()
    for f in os.listdir(cli):
        if f.startswith("s") and f.endswith(".py"):
            with open(os.path.join(cli, f)) as fh:
                tree = ast.parse(fh.read())
            if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
                commands.add(f[:-3])
    assert commands and commands <= names, f"commands without a launcher: {commands - names}"


def _imports(argv: list[str]) -> set[str]:
    env = {**os.environ, "MUSTER_CONF": "/nonexistent/slurm.conf", "MUSTER_CLIENT_RETRY": "0",
           "PYTHONPATH": os.path.join(REPO, "src")}
    cp = subprocess.run([sys.executable, "-X", "importtime", *argv], env=env,
                        capture_output=True, text=True, timeout=60)
    return {ln.rsplit("|", 1)[1].strip() for ln in cp.stderr.splitlines()
            if ln.startswith("import time:") and "cumulative" not in ln}


def test_a_launcher_imports_nothing_its_command_does_not():
    launcher = _imports([os.path.join(REPO, "bin", "squeue"), "--usage"])
    direct = _imports(["-c", "import sys; sys.argv[1:] = ['--usage']; "
                             "from muster.cli.squeue import main; sys.exit(main())"])
    assert "muster.cli.squeue" in launcher  # it did run the command
    assert launcher - direct == set()
    assert "re" not in launcher and "enum" not in launcher  # what pip's wrapper added


def test_a_plain_submission_imports_no_regex_or_json():
    """``sbatch --wrap`` parses every option and builds the request before it fails to reach a
    controller: ``re`` (with ``enum``) and the container options' module (``json``) cost ~8 ms
    of a ~23 ms call and stay unimported unless an option needs them (--switches=N@TIME,
    --container*)."""
    plain = _imports([os.path.join(REPO, "bin", "sbatch"), "-N1", "-n2", "-t", "5",
                      "--gres=gpu:1", "--wrap", "true"])
    assert "muster.cli.jobopts" in plain  # it did parse the options
    assert not plain & {"re", "enum", "json", "muster.common.containerspec"}, sorted(plain)
    wait = _imports([os.path.join(REPO, "bin", "sbatch"), "--switches=1@1:00", "--wrap", "true"])
    assert "re" in wait  # the one option that needs it still works through it
