"""Import contracts: the CLI stays light; the pure layers stay pure (ARCHITECTURE §2, §5)."""

import ast
import json
import pathlib
import subprocess
import sys

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "muster"
CLI_MODULES = ["sbatch", "squeue", "scancel", "sinfo", "scontrol", "sacct", "sstat", "seff", "muster",
               "sdiag", "setdebug"]
HEAVY = {"asyncio", "msgspec", "pydantic", "rich", "click", "http.client", "httpx", "requests",
         "urllib3", "aiohttp", "sqlite3", "typer"}


def test_cli_modules_import_only_light_modules():
    code = (
        "import sys, json\n"
        f"mods = {CLI_MODULES!r}\n"
        "out = {}\n"
        "for m in mods:\n"
        "    before = set(sys.modules)\n"
        "    __import__('muster.cli.' + m)\n"
        "out = sorted(sys.modules)\n"
        "print(json.dumps(out))\n"
    )
    loaded = set(json.loads(subprocess.check_output([sys.executable, "-c", code])))
    bad = sorted(m for m in loaded if m in HEAVY or m.split(".")[0] in HEAVY)
    assert not bad, f"CLI import path pulls in {bad}"
    assert not any(m.startswith("muster.controller") or m.startswith("muster.store")
                   or m.startswith("muster.agent") for m in loaded)


FORBIDDEN_PURE = {"socket", "subprocess", "threading", "asyncio", "time", "random", "os",
                  "sqlite3", "select", "multiprocessing", "datetime"}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_pure_layers_touch_no_io_clock_or_randomness():
    offenders = {}
    for pkg in ("model", "lifecycle", "core"):
        for path in (SRC / pkg).rglob("*.py"):
            bad = _imports(path) & FORBIDDEN_PURE
            if bad:
                offenders[str(path.relative_to(SRC))] = sorted(bad)
    assert not offenders, offenders


def test_pure_layers_do_not_import_the_shell():
    for pkg in ("model", "lifecycle", "core"):
        for path in (SRC / pkg).rglob("*.py"):
            text = path.read_text()
            for shell in ("muster.controller", "muster.store", "muster.agent", "muster.api"):
                assert shell not in text, f"{path} imports {shell}"


def test_every_operation_has_exactly_one_handler():
    """Two handlers registered under one name silently replace each other (a real bug:
    srun's allocation release once shadowed `scontrol release`)."""
    import re

    import pytest

    from muster.controller import ops, opspec
    names = []
    for mod in ops.MODULES:  # every module that registers operations (controller.ops)
        text = pathlib.Path(mod.__file__).read_text()
        names += re.findall(r'@op\("([a-z_]+)"\)', text) + re.findall(r'OPS\["([a-z_]+)"\]', text)
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert set(names) == set(ops.OPS) == set(opspec.REQUEST_FIELDS)
    with pytest.raises(RuntimeError, match="registered twice"):
        opspec.op("ping")(lambda ctl, msg, uid, gid: None)
