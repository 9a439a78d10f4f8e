"""Layering contract (issue 15, ARCHITECTURE §2): every module imports only from its own
layer or the layers below it, and no two modules import each other, directly or around a loop.

Imports are read with ``ast`` from the source — top level, inside functions and under
``if TYPE_CHECKING:`` alike: a lazy or type-only import is still a dependency of the design,
and a cycle hidden in a function is a cycle that bites the day someone hoists the import.
"""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "muster"

# Lowest first. A package may import packages at its own rank or below; packages sharing a
# rank (a tuple) may not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("common",),      # stdlib-only helpers shared by CLI and daemons (framing, units, GRES specs)
    # wire records (msgspec Structs) for controller, agent and API; its `fields` module is
    # stdlib-only, the CLI's view of the same definitions (issue 15)
    ("protocol",),
    ("config",),      # slurm.conf / gres.conf syntax
    ("model",),       # records: Job, states
    ("core",),        # pure scheduling; also slurm.conf -> SchedConfig (core.confview)
    ("lifecycle",),   # pure state machines over model records
    ("store",),       # persistence
    ("agent", "api"),  # musterd and musterrestd: peers, both clients of the controller
    ("controller",),  # musterctld
    # The simulator replays traces through core and lifecycle; it also reuses the controller's
    # usage/fair-share bookkeeping (controller.accounts on an in-memory store) so multifactor
    # priority is computed by the very code that runs live, hence it sits above the controller.
    ("sim",),
    # The CLIs: the Slurm-named commands import only the standard library and common
    # (tests/unit/test_import_contract.py); the admin command `muster` starts daemons and the
    # simulator, so the package as a whole is the top layer.
    ("cli",),
)
RANK = {pkg: i for i, group in enumerate(LAYERS) for pkg in group}
# Pairs the ranks allow but the design does not: the controller talks to musterd and
# musterrestd over the wire only, and the simulator runs no daemon.
FORBIDDEN = {("controller", "agent"), ("controller", "api"), ("sim", "agent"), ("sim", "api")}


def module_name(path: pathlib.Path, root: pathlib.Path = SRC) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool,
               modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``source`` imports (absolute or relative, anywhere in the
    file). ``from p import m`` depends on ``p.m`` when that is a module, on ``p`` otherwise."""
    out: set[str] = set()
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = base[:len(base) - (node.level - 1)]
                target = ".".join(up + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.add(sub if sub in modules else target)
    return {m for m in out if m in modules and m != module}


def graph(root: pathlib.Path = SRC) -> dict[str, set[str]]:
    """module -> the modules of the tree it imports."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    names = set(files)
    return {mod: imports_of(path.read_text(), mod, path.name == "__init__.py", names)
            for mod, path in files.items()}


def package(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_imports(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in sorted(g.items()):
        src = package(mod)
        for dep in sorted(deps):
            dst = package(dep)
            if src == dst or not src or not dst:
                continue
            if src not in RANK or dst not in RANK:
                bad.append(f"{mod} -> {dep} (package missing from LAYERS)")
            elif RANK[dst] >= RANK[src] or (src, dst) in FORBIDDEN:
                bad.append(f"{mod} -> {dep} ({src} may not import {dst})")
    return bad


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``g``: one list of modules per strongly connected component of
    more than one module (Tarjan, iterative), each rotated to start at its smallest name and
    closed by repeating it, e.g. ``[a, b, a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    counter = 0
    for start in sorted(g):
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in g:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(_loop(sorted(comp), g))
    return out


def _loop(comp: list[str], g: dict[str, set[str]]) -> list[str]:
    """A shortest loop through the component from its smallest module back to it (BFS)."""
    members = set(comp)
    first = comp[0]
    prev: dict[str, str] = {}
    frontier = [first]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(g[v] & members):
                if w == first:
                    path = [v]
                    while path[-1] != first:
                        path.append(prev[path[-1]])
                    return [*reversed(path), first]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp  # unreachable for a strongly connected component


# ---- the contract --------------------------------------------------------------------------

def test_every_package_has_a_layer():
    pkgs = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert pkgs == set(RANK), f"add to or drop from LAYERS: {sorted(pkgs ^ set(RANK))}"


def test_no_upward_imports():
    bad = upward_imports(graph())
    assert not bad, "upward imports:\n  " + "\n  ".join(bad)


def test_no_import_cycles():
    found = cycles(graph())
    assert not found, "import cycles:\n  " + "\n  ".join(" -> ".join(c) for c in found)


# ---- the checker itself can fail ------------------------------------------------------------

def _tree(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    root = tmp_path / "muster"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_checker_reports_a_synthetic_upward_import(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "", "common/__init__.py": "", "controller/__init__.py": "",
        "controller/x.py": "X = 1\n",
        # a lazy import inside a function counts
        "common/low.py": "def f():\n    from muster.controller.x import X\n    return X\n",
    })
    bad = upward_imports(graph(root))
    assert bad == ["muster.common.low -> muster.controller.x (common may not import controller)"]


def test_checker_reports_a_peer_import(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "", "agent/__init__.py": "", "api/__init__.py": "",
        "agent/a.py": "from muster.api import b\n", "api/b.py": "",
    })
    assert upward_imports(graph(root)) == ["muster.agent.a -> muster.api.b (agent may not import api)"]


def test_checker_reports_a_synthetic_cycle(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "", "core/__init__.py": "",
        "core/a.py": "from .b import B\nA = 1\n",
        "core/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\nB = 1\n",
        "core/c.py": "def f():\n    from muster.core import a\n",
        "core/d.py": "from muster.core.a import A\n",
    })
    assert cycles(graph(root)) == [["muster.core.a", "muster.core.b", "muster.core.c",
                                    "muster.core.a"]]
    assert upward_imports(graph(root)) == []
