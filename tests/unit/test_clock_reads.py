"""No module of the controller, lifecycle, core, store, model or simulator reads the wall clock
on its own: they use the injected clock (muster.common.clock), so a virtual clock drives all
of their time (issue 15). The scan is syntactic (ast): calls of time.time/monotonic (and their
_ns forms), time.localtime/gmtime/ctime/asctime/strftime without an explicit time,
datetime.now/utcnow/today and date.today, however the module or function was imported.
``time.perf_counter`` is allowed: it measures our own work and is never compared with a job's
times."""

from __future__ import annotations

import ast
import pathlib

import muster

SRC = pathlib.Path(muster.__file__).parent
PACKAGES = ("controller", "lifecycle", "core", "store", "model", "sim")

# (path relative to src/muster, "module.function") → why it may read the real clock. Empty
# today: the malloc_trim pacing of muster.common.netio (compared with asyncio's real timers)
# is outside the scanned packages.
ALLOWED: dict[tuple[str, str], str] = {
    # the reconnect window is real time spent waiting for a database server (time.sleep
    # between tries): on a virtual clock, which never moves while it sleeps, it would never end
    ("store/postgres.py", "time.monotonic"): "reconnect deadline measured in real seconds",
    # the creation stamp of a backup file says when the file was written, not a job's time
    ("store/backup.py", "time.time"): "a backup file's creation time is the wall clock's",
}

TIME_ALWAYS = {"time", "time_ns", "monotonic", "monotonic_ns"}
TIME_NO_ARG = {"localtime", "gmtime", "ctime", "asctime"}  # no argument: the present
DATETIME_CLASS = {"now", "utcnow", "today"}


def wall_reads(source: str) -> list[tuple[int, str]]:
    """(line, "module.function") of every direct clock read in ``source``."""
    tree = ast.parse(source)
    mods: dict[str, str] = {}  # local name → "time" | "datetime" (the modules)
    classes: dict[str, str] = {}  # local name → "datetime.datetime" | "datetime.date"
    funcs: dict[str, str] = {}  # local name → "time.time" etc. (from time import time)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in ("time", "datetime"):
                    mods[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if node.module == "datetime" and a.name in ("datetime", "date"):
                    classes[a.asname or a.name] = full
                else:
                    funcs[a.asname or a.name] = full
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _called(node.func, mods, classes, funcs)
        if name and _reads_clock(name, node):
            out.append((node.lineno, name))
    return out


def _called(func: ast.expr, mods, classes, funcs) -> str | None:
    if isinstance(func, ast.Name):
        return funcs.get(func.id)
    if not isinstance(func, ast.Attribute):
        return None
    base = func.value
    if isinstance(base, ast.Name):
        if base.id in mods:
            return f"{mods[base.id]}.{func.attr}"
        if base.id in classes:
            return f"{classes[base.id]}.{func.attr}"
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) \
            and mods.get(base.value.id) == "datetime":  # datetime.datetime.now()
        return f"datetime.{base.attr}.{func.attr}"
    return None


def _reads_clock(name: str, call: ast.Call) -> bool:
    mod, _, fn = name.rpartition(".")
    if mod == "time":
        if fn in TIME_ALWAYS:
            return True
        if fn in TIME_NO_ARG:
            return not call.args
        return fn == "strftime" and len(call.args) < 2
    return mod in ("datetime.datetime", "datetime.date") and fn in DATETIME_CLASS


def test_scanner_finds_every_spelling():
    src = ("import time as _t\nimport datetime\nfrom datetime import datetime as DT\n"
           "from time import monotonic\n"
           "a = _t.time()\nb = monotonic()\nc = DT.now()\nd = datetime.date.today()\n"
           "e = _t.localtime()\nf = _t.localtime(0)\ng = _t.perf_counter()\n"
           "h = _t.strftime('%H')\ni = _t.strftime('%H', _t.localtime(5))\n")
    assert wall_reads(src) == [(5, "time.time"), (6, "time.monotonic"),
                               (7, "datetime.datetime.now"), (8, "datetime.date.today"),
                               (9, "time.localtime"), (12, "time.strftime")]


def test_no_module_reads_the_wall_clock_itself():
    found = []
    used = set()
    for pkg in PACKAGES:
        for path in sorted((SRC / pkg).rglob("*.py")):
            rel = path.relative_to(SRC).as_posix()
            for line, name in wall_reads(path.read_text()):
                if (rel, name) in ALLOWED:
                    used.add((rel, name))
                else:
                    found.append(f"{rel}:{line}: {name}()")
    assert not found, "read the time through muster.common.clock instead:\n" + "\n".join(found)
    assert used == set(ALLOWED), f"stale allowlist entries: {set(ALLOWED) - used}"
