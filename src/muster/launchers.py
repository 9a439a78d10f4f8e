"""Rewrite the installed Slurm command launchers to start Python without ``site``.

    python -m muster.launchers BINDIR      # scripts/up.sh and scripts/test.sh, after pip

Why: a command such as ``sbatch`` is started thousands of times by the tools that drive Slurm
(one process per submission). Python's ``site`` module lists site-packages, reads every
``.pth`` file (setuptools' ``distutils-precedence.pth`` imports a module of its own; Debian's
Python adds ``sitecustomize`` and apport's hook): ~3.7 ms of a ~13.6 ms ``python -c pass``
here, of which the command gets back ~1.7 ms of CPU (it then imports ``os`` and the like
itself; docs/design.md, "Dependencies"). The Slurm commands import only the
standard library and Muster (tests/unit/test_launchers.py), so they need none of it: each
launcher pip installed (``#!/venv/bin/python``, from bin/) is rewritten as
``#!/venv/bin/python -S`` with the one directory that holds the ``muster`` package put on
``sys.path`` — the directory pip's ``.pth`` file (editable install) or site-packages (regular
one) would have given it.

Invariants:

* Only files that are Muster's own launchers are touched: a ``#!`` line naming one
  interpreter (pip's, kept) and a body that is exactly bin/'s template for one ``muster.cli``
  module (or this module's own earlier rewrite of it). Anything
  else in BINDIR (pip's, the entry points ``muster``, ``musterctld``…) is left alone.
* The rewrite is idempotent, atomic per file (a temporary file renamed over the launcher, same
  mode) and safe to skip: a pip reinstall puts back the plain launchers, which still work —
  they are just slower to start.
* A ``#!`` line longer than the kernel's oldest limit (127 bytes), or an interpreter path with
  white space, cannot carry an argument portably: such a venv keeps pip's launchers.
"""

from __future__ import annotations

import os
import re
import sys

SHEBANG_MAX = 127  # Linux before 5.1 reads 128 bytes of a #! line (BINPRM_BUF_SIZE)
_PLAIN = re.compile(r"\A#!(?P<python>\S+)\n(?:#[^\n]*\n)*import sys\n\n"
                    r"from muster\.cli\.(?P<name>\w+) import main\n\nsys\.exit\(main\(\)\)\n\Z")
_FAST = re.compile(r"\A#!(?P<python>\S+) -S\n# The `(?P<name>\w+)` command, started without")

TEMPLATE = """#!{python} -S
# The `{name}` command, started without Python's `site` (-S): ~2 ms less per call. Written by
# `python -m muster.launchers` over pip's launcher (bin/{name}); the commands import only the
# standard library and Muster, whose directory is put on sys.path here.
import sys

sys.path.insert(1, {root!r})
from muster.cli.{name} import main  # noqa: E402

sys.exit(main())
"""


def package_root() -> str:
    """The directory the installed ``muster`` package is imported from."""
    import muster
    return os.path.dirname(os.path.dirname(os.path.abspath(muster.__file__)))


def fast_launcher(text: str, root: str) -> str | None:
    """The -S launcher for one of pip's plain launchers (or an older -S one), None when
    ``text`` is not a Muster launcher or its interpreter cannot take an argument."""
    m = _PLAIN.match(text) or _FAST.match(text)
    if m is None:
        return None
    line = f"#!{m['python']} -S"
    if len(line.encode()) > SHEBANG_MAX:
        return None
    return TEMPLATE.format(python=m["python"], name=m["name"], root=root)


def rewrite(bindir: str, root: str | None = None) -> list[str]:
    """Rewrite every Muster launcher in ``bindir``; returns the names rewritten."""
    root = root or package_root()
    done = []
    for name in sorted(os.listdir(bindir)):
        path = os.path.join(bindir, name)
        if not name.startswith("s") or os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read(4096)
        except (OSError, UnicodeDecodeError):
            continue
        new = fast_launcher(text, root)
        if new is None or new == text:
            continue
        tmp = f"{path}.muster-tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(new)
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
        done.append(name)
    return done


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not os.path.isdir(args[0]):
        print("usage: python -m muster.launchers BINDIR", file=sys.stderr)
        return 2
    rewrite(args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
