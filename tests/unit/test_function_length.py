"""No function of the controller, lifecycle or core is longer than 80 lines (issue 15), unless
it is a hot loop that says so: a ``# hot loop: <why>`` comment among its first lines (between
the ``def`` line and its first statement after the docstring), for loops whose speed needs
them inline. Length is ``end_lineno - lineno + 1`` of the ``def`` (decorators not counted,
docstring and comments counted). Methods and nested functions count on their own."""

from __future__ import annotations

import ast
import pathlib
import re

import muster

SRC = pathlib.Path(muster.__file__).parent
PACKAGES = ("controller", "lifecycle", "core")
LIMIT = 80

# (path relative to src/muster, qualified name) → why it may stay longer for now. Each entry
# is to be removed once its function is split; an entry that no longer matches a long
# function fails test_allowlist_is_current.
ALLOWED: dict[tuple[str, str], str] = {}

HOT = re.compile(r"^\s*# hot loop:\s*\S")

Func = ast.FunctionDef | ast.AsyncFunctionDef


def long_functions(source: str) -> list[tuple[str, int, int]]:
    """(qualified name, line, length) of every function of ``source`` over :data:`LIMIT`
    lines that does not declare itself a hot loop."""
    lines = source.splitlines()
    out: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, Func):
                name = f"{prefix}{child.name}"
                assert child.end_lineno is not None
                length = child.end_lineno - child.lineno + 1
                if length > LIMIT and not _declares_hot_loop(child, lines):
                    out.append((name, child.lineno, length))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def _declares_hot_loop(fn: Func, lines: list[str]) -> bool:
    body = fn.body
    has_doc = (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
               and isinstance(body[0].value.value, str))
    first = body[1] if has_doc and len(body) > 1 else body[0]
    # from the def line up to (not including) the first statement after the docstring
    head = lines[fn.lineno - 1:first.lineno - 1]
    return any(HOT.match(line) for line in head)


def _scan() -> dict[tuple[str, str], tuple[int, int]]:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((SRC / pkg).rglob("*.py")):
            rel = path.relative_to(SRC).as_posix()
            for name, line, length in long_functions(path.read_text()):
                found[(rel, name)] = (line, length)
    return found


def test_no_long_functions():
    bad = [f"{rel}:{line} {name}: {length} lines"
           for (rel, name), (line, length) in sorted(_scan().items())
           if (rel, name) not in ALLOWED]
    assert not bad, (f"functions over {LIMIT} lines (split them, or mark a hot loop with a "
                     "'# hot loop: why' comment at the top of its body):\n" + "\n".join(bad))


def test_allowlist_is_current():
    found = _scan()
    stale = [f"{rel} {name}" for rel, name in ALLOWED if (rel, name) not in found]
    assert not stale, "allowlisted but no longer long (remove from ALLOWED): " + ", ".join(stale)
    assert all(why.strip() for why in ALLOWED.values())


def _func(name: str, n_lines: int, head: str = "", doc: bool = True, indent: str = "") -> str:
    body = [f'{indent}    """Doc."""'] if doc else []
    body += [f"{indent}    {head}"] if head else []
    body += [f"{indent}    x = {i}" for i in range(n_lines - 1 - len(body))]
    return "\n".join([f"{indent}def {name}():"] + body) + "\n"


def test_scan_catches_a_long_function():
    assert long_functions(_func("ok", LIMIT)) == []
    assert long_functions(_func("too_long", LIMIT + 1)) == [("too_long", 1, LIMIT + 1)]
    # methods and nested functions are named and counted on their own
    src = "class C:\n" + _func("meth", LIMIT + 5, indent="    ")
    assert long_functions(src) == [("C.meth", 2, LIMIT + 5)]
    outer = "def outer():\n" + _func("inner", LIMIT + 2, indent="    ")
    assert [(n, ln) for n, ln, _ in long_functions(outer)] == [("outer", 1), ("outer.inner", 2)]
    async_src = "async " + _func("coro", LIMIT + 1)
    assert long_functions(async_src) == [("coro", 1, LIMIT + 1)]


def test_hot_loop_comment_must_be_at_the_top_and_say_why():
    hot = _func("hot", LIMIT + 20, head="# hot loop: runs per node per pass")
    assert long_functions(hot) == []
    nodoc = _func("hot", LIMIT + 20, head="# hot loop: runs per node per pass", doc=False)
    assert long_functions(nodoc) == []
    # no reason after the colon: not a declaration
    assert len(long_functions(_func("bare", LIMIT + 20, head="# hot loop:"))) == 1
    # the same comment deep inside the body does not count
    lines = _func("late", LIMIT + 20).splitlines()
    lines.insert(30, "    # hot loop: too late to say so")
    assert [n for n, _, _ in long_functions("\n".join(lines) + "\n")] == ["late"]
