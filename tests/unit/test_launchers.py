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


# ---- the -S launchers (muster.launchers, run by scripts/up.sh and scripts/test.sh) ---------

def _plain(python: str, name: str) -> str:
    with open(os.path.join(REPO, "bin", name)) as fh:
        return fh.read().replace("#!python\n", f"#!{python}\n", 1)


def test_every_plain_launcher_has_a_fast_form_and_the_rewrite_is_idempotent():
    from muster.launchers import fast_launcher
    for rel in _launchers():
        name = os.path.basename(rel)
        fast = fast_launcher(_plain("/v/bin/python", name), "/v/src")
        assert fast is not None, rel
        assert fast.startswith("#!/v/bin/python -S\n"), rel
        assert f"from muster.cli.{name} import main" in fast and "'/v/src'" in fast, rel
        assert fast_launcher(fast, "/v/src") == fast  # already fast: unchanged
        assert "'/w/src'" in fast_launcher(fast, "/w/src")  # a moved package: the new root


def test_foreign_files_and_long_interpreters_are_left_alone():
    from muster.launchers import SHEBANG_MAX, fast_launcher
    assert fast_launcher("#!/v/bin/python\nimport sys\nprint('hi')\n", "/v/src") is None
    assert fast_launcher("#!/bin/sh\nexec true\n", "/v/src") is None
    # pip's entry-point wrapper (muster, musterctld): not a Slurm launcher
    assert fast_launcher("#!/v/bin/python\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                         "from muster.cli.muster import main\n", "/v/src") is None
    long_python = "/" + "x" * (SHEBANG_MAX - 5) + "/python"
    assert fast_launcher(_plain(long_python, "sbatch"), "/v/src") is None


def test_rewrite_replaces_launchers_in_place_keeping_their_mode(tmp_path):
    from muster.launchers import rewrite
    py = os.path.join(os.path.dirname(sys.executable), "python")
    for name in ("sinfo", "sbatch"):
        p = tmp_path / name
        p.write_text(_plain(py, name))
        p.chmod(0o751)
    other = tmp_path / "seven"
    other.write_text("#!/bin/sh\necho 7\n")
    os.symlink(tmp_path / "sinfo", tmp_path / "squeue")  # a link is not rewritten through
    assert rewrite(str(tmp_path), os.path.join(REPO, "src")) == ["sbatch", "sinfo"]
    assert rewrite(str(tmp_path), os.path.join(REPO, "src")) == []  # idempotent
    assert other.read_text() == "#!/bin/sh\necho 7\n"
    assert (tmp_path / "sinfo").stat().st_mode & 0o7777 == 0o751
    assert sorted(os.listdir(tmp_path)) == ["sbatch", "seven", "sinfo", "squeue"]  # no temp left
    env = {**os.environ, "MUSTER_CONF": "/nonexistent/slurm.conf", "MUSTER_CLIENT_RETRY": "0"}
    env.pop("PYTHONPATH", None)
    cp = subprocess.run([str(tmp_path / "sbatch"), "--usage"], env=env, capture_output=True,
                        text=True, timeout=60)
    assert cp.returncode == 0 and "Usage: sbatch" in cp.stdout, cp.stderr


def test_the_installed_commands_start_without_site_and_import_only_the_standard_library():
    """scripts/test.sh (the README's command) rewrote this virtualenv's launchers: each starts
    Python with -S, so no site-packages directory is on its path — a third-party import in a
    command would fail here (and in every end-to-end test that runs the commands)."""
    bindir = os.path.dirname(sys.executable)
    for rel in _launchers():
        with open(os.path.join(bindir, os.path.basename(rel))) as fh:
            assert fh.readline().rstrip().endswith(" -S"), f"{rel} was not rewritten"
    env = {**os.environ, "MUSTER_CONF": "/nonexistent/slurm.conf", "MUSTER_CLIENT_RETRY": "0"}
    cp = subprocess.run([os.path.join(bindir, "squeue"), "--usage"], env=env,
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "Usage: squeue" in cp.stdout, cp.stderr
    cp = subprocess.run([sys.executable, "-S", "-X", "importtime", os.path.join(bindir, "sbatch"),
                         "-N1", "--gres=gpu:1", "--wrap", "true"], env=env, capture_output=True,
                        text=True, timeout=60)
    mods = {ln.rsplit("|", 1)[1].strip() for ln in cp.stderr.splitlines()
            if ln.startswith("import time:") and "cumulative" not in ln}
    assert "muster.cli.jobopts" in mods  # it did parse the options
    outside = {m for m in mods if m.split(".")[0] not in sys.stdlib_module_names
               and m.split(".")[0] != "muster"}
    assert not outside, sorted(outside)
    assert "site" not in mods
