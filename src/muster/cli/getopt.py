"""A small getopt_long-compatible option parser shared by every Muster command.

Standard library only and cheap to import: the CLI tools import it before anything else.

Why not argparse: Slurm's tools use glibc ``getopt_long``, whose diagnostics, abbreviation rules
and argument forms differ from argparse's.  Scripts (and people) depend on the exact behaviour:

* long options may be abbreviated to any unique prefix (``--par`` = ``--partition``); an exact
  name always wins; a prefix shared by several *different* options is ambiguous;
* ``--opt=value`` and ``--opt value`` (required argument), only ``--opt=value`` (optional
  argument); ``-xVALUE`` and ``-x VALUE`` (required), only ``-xVALUE`` (optional);
* short flags bundle: ``-Hv`` = ``-H -v``; ``-Hp debug`` = ``-H -p debug``;
* ``--`` ends the options; a lone ``-`` is an operand;
* ``stop_at_positional=True`` stops at the first operand (``sbatch [opts] script [args]``,
  like an optstring starting with ``+``); otherwise operands are collected and parsing goes on
  (GNU permutation).

Diagnostics render exactly as glibc + Slurm print them, e.g.::

    sbatch: unrecognized option '--bogus-option'
    Try "sbatch --help" for more information

Public API
    NO_ARG, REQUIRED, OPTIONAL            argument kinds
    OptSpec(short, long, arg, dest, convert=None, action="store", const=True)
    Occurrence(spec, value, name)         one option as found on the command line
    GetoptParser(prog, specs, stop_at_positional=False, exit_code=255, hint=True, info=None)
        .parse(argv, info=None) -> (list[Occurrence], list[str] operands)
        .parse_into(argv, values=None) -> (dict dest -> value, operands)
    apply_occurrences(occurrences, values)  apply store/append/count/store_const actions
    CliExit(lines, code)                  "print these stderr lines, exit with code"
    InfoExit(prog, kind)                  "print --help/--usage/--version's text on stdout"
    UsageError(prog, text, code=255, hint=True)
"""

from __future__ import annotations

from _collections_abc import Callable, Iterable, Sequence

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs CLI start-up time
if TYPE_CHECKING:  # annotations only
    from typing import Any

__all__ = [
    "NO_ARG",
    "REQUIRED",
    "OPTIONAL",
    "OptSpec",
    "Occurrence",
    "GetoptParser",
    "CliExit",
    "UsageError",
    "InfoExit",
    "INFO_KINDS",
    "apply_occurrences",
]

NO_ARG = 0
REQUIRED = 1
OPTIONAL = 2


class CliExit(Exception):
    """Stop the command: print ``lines`` (already prefixed) to stderr and exit with ``code``."""

    def __init__(self, lines: str | Iterable[str], code: int = 1):
        if isinstance(lines, str):
            lines = [lines]
        self.lines: list[str] = list(lines)
        self.code: int = code
        self.stdout: str = ""  # printed on stdout before the lines (InfoExit)
        super().__init__("\n".join(self.lines))

    def render(self) -> str:
        """The stderr text, one line per entry, newline-terminated."""
        return "".join(line + "\n" for line in self.lines)


class InfoExit(CliExit):
    """``--help``, ``--usage`` or ``--version`` was given: print the answer on stdout and exit.

    The texts live in :mod:`muster.cli.helptext`, imported only here, so that a command that
    is not asked for them does not load them. ``stdout`` is what run_main prints.
    """

    def __init__(self, prog: str, kind: str):
        from muster.cli.helptext import answer
        text, code = answer(prog, kind)
        super().__init__([], code)
        self.kind = kind
        self.stdout = text


INFO_KINDS = ("help", "usage", "version")


class UsageError(CliExit):
    """A getopt-level error: unknown option, missing or unexpected argument.

    ``text`` is the getopt message without the program prefix, e.g.
    ``unrecognized option '--bogus'``.  ``hint`` adds the ``Try "<prog> --help" ...`` line
    (sacct does not print it); ``code`` is the exit status (255 for sbatch/srun/salloc,
    1 for squeue/sinfo/sacct).
    """

    def __init__(self, prog: str, text: str, code: int = 255, hint: bool = True):
        self.prog = prog
        self.text = text
        lines = [f"{prog}: {text}"]
        if hint:
            lines.append(f'Try "{prog} --help" for more information')
        super().__init__(lines, code)


class OptSpec:
    """One option of the table.

    ``short``: single letter or None.  ``long``: name (without ``--``), a tuple of alias names,
    or None.  ``arg``: NO_ARG / REQUIRED / OPTIONAL.  ``dest``: key used by ``parse_into``
    (default: the first long name with ``-`` → ``_``, else the short letter).
    ``convert``: optional callable applied to the value by ``parse_into``.
    ``action``: ``store`` (last wins), ``append`` (list), ``count`` (+1 each time),
    ``store_const`` (store ``const``; the default for NO_ARG options is ``True``).
    """

    __slots__ = ("short", "longs", "arg", "dest", "convert", "action", "const")

    def __init__(
        self,
        short: str | None,
        long: str | Sequence[str] | None,
        arg: int = NO_ARG,
        dest: str | None = None,
        convert: Callable[[str], Any] | None = None,
        action: str | None = None,
        const: Any = True,
    ):
        if short is not None and len(short) != 1:
            raise ValueError(f"short option must be one character: {short!r}")
        if long is None:
            longs: tuple[str, ...] = ()
        elif isinstance(long, str):
            longs = (long,)
        else:
            longs = tuple(long)
        if short is None and not longs:
            raise ValueError("option needs a short or a long name")
        if arg not in (NO_ARG, REQUIRED, OPTIONAL):
            raise ValueError(f"bad argument kind {arg!r}")
        if action is None:
            action = "store_const" if arg == NO_ARG else "store"
        if action not in ("store", "append", "count", "store_const"):
            raise ValueError(f"bad action {action!r}")
        self.short = short
        self.longs = longs
        self.arg = arg
        self.dest: str = dest or (longs[0].replace("-", "_") if longs else str(short))
        self.convert = convert
        self.action = action
        self.const = const

    @property
    def long(self) -> str | None:
        return self.longs[0] if self.longs else None

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"OptSpec({self.short!r}, {self.longs!r}, arg={self.arg}, dest={self.dest!r})"


class Occurrence:
    """One option found in argv: the spec, its value (None when absent) and the spelling used
    (``-t`` or ``--time``)."""

    __slots__ = ("spec", "value", "name")

    def __init__(self, spec: OptSpec, value: str | None, name: str):
        self.spec = spec
        self.value = value
        self.name = name

    @property
    def dest(self) -> str:
        return self.spec.dest

    def __repr__(self) -> str:  # pragma: no cover
        return f"Occurrence({self.name!r}, {self.value!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Occurrence)
            and other.spec is self.spec
            and other.value == self.value
            and other.name == self.name
        )

    __hash__ = None  # type: ignore[assignment]


class GetoptParser:
    """getopt_long over an ``OptSpec`` table.

    ``info`` says how the options whose dest is help, usage or version end the command
    (:class:`InfoExit`), as each Slurm command does it: ``"first"`` — at the first one met,
    before the rest of argv is looked at (Slurm's getopt loops exit there: ``sbatch --help
    --bogus`` prints the help); ``"last"`` — once all of argv parsed, version before the last
    of help/usage (sacct, sstat set flags and look at them after the loop); None — they are
    ordinary options (option lines inside batch scripts).
    """

    def __init__(
        self,
        prog: str,
        specs: Iterable[OptSpec],
        stop_at_positional: bool = False,
        exit_code: int = 255,
        hint: bool = True,
        info: str | None = None,
    ):
        if info not in (None, "first", "last"):
            raise ValueError(f"bad info mode {info!r}")
        self.info = info
        self.prog = prog
        self.specs: list[OptSpec] = list(specs)
        self.stop_at_positional = stop_at_positional
        self.exit_code = exit_code
        self.hint = hint
        self._short: dict[str, OptSpec] = {}
        self._long: dict[str, OptSpec] = {}
        self._long_order: list[str] = []
        for spec in self.specs:
            if spec.short is not None:
                if spec.short in self._short:
                    raise ValueError(f"duplicate short option -{spec.short}")
                self._short[spec.short] = spec
            for name in spec.longs:
                if name in self._long:
                    raise ValueError(f"duplicate long option --{name}")
                self._long[name] = spec
                self._long_order.append(name)

    # -- errors ---------------------------------------------------------------------------------
    def error(self, text: str) -> UsageError:
        return UsageError(self.prog, text, self.exit_code, self.hint)

    # -- lookup ---------------------------------------------------------------------------------
    def lookup_long(self, name: str, shown: str) -> tuple[OptSpec, str]:
        """Resolve a (possibly abbreviated) long name; ``shown`` is the argv text for messages."""
        spec = self._long.get(name)
        if spec is not None:
            return spec, name
        matches = [n for n in self._long_order if n.startswith(name)] if name else []
        if not matches:
            raise self.error(f"unrecognized option '{shown}'")
        distinct = {id(self._long[n]) for n in matches}
        if len(distinct) > 1:
            poss = " ".join(f"'--{n}'" for n in matches)
            raise self.error(f"option '{shown}' is ambiguous; possibilities: {poss}")
        return self._long[matches[0]], matches[0]

    # -- parsing --------------------------------------------------------------------------------
    def parse(self, argv: Sequence[str],
              info: str | None = None) -> tuple[list[Occurrence], list[str]]:
        """Parse ``argv`` (without the program name).

        Returns the options in command-line order and the operands (for
        ``stop_at_positional``: the first operand and everything after it). ``info``
        overrides the parser's own mode for this call; raises :class:`InfoExit` per that mode.
        """
        mode = info or self.info
        occ, operands = self._parse(argv, mode == "first")
        if mode == "last":
            kinds = [o.spec.dest for o in occ if o.spec.dest in INFO_KINDS]
            if kinds:
                raise InfoExit(self.prog, "version" if "version" in kinds else kinds[-1])
        return occ, operands

    def _parse(self, argv: Sequence[str], first: bool) -> tuple[list[Occurrence], list[str]]:
        """The getopt_long loop; ``first``: raise InfoExit at the first info option."""
        occ: list[Occurrence] = []
        operands: list[str] = []
        args = list(argv)
        i = 0
        n = len(args)
        while i < n:
            a = args[i]
            i += 1
            if a == "--":
                operands.extend(args[i:])
                break
            if a.startswith("--"):
                body = a[2:]
                value: str | None
                if "=" in body:
                    name, value = body.split("=", 1)
                    has_value = True
                else:
                    name, value, has_value = body, None, False
                spec, full = self.lookup_long(name, a)
                if spec.arg == NO_ARG:
                    if has_value:
                        raise self.error(f"option '--{full}' doesn't allow an argument")
                elif spec.arg == REQUIRED and not has_value:
                    if i >= n:
                        raise self.error(f"option '--{full}' requires an argument")
                    value = args[i]
                    i += 1
                if first and spec.dest in INFO_KINDS:
                    raise InfoExit(self.prog, spec.dest)
                occ.append(Occurrence(spec, value, "--" + full))
                continue
            if a.startswith("-") and a != "-":
                j = 1
                while j < len(a):
                    ch = a[j]
                    j += 1
                    got = self._short.get(ch)
                    if got is None:
                        raise self.error(f"invalid option -- '{ch}'")
                    spec = got
                    if spec.arg == NO_ARG:
                        if first and spec.dest in INFO_KINDS:
                            raise InfoExit(self.prog, spec.dest)
                        occ.append(Occurrence(spec, None, "-" + ch))
                        continue
                    rest = a[j:]
                    if rest:
                        value = rest
                    elif spec.arg == OPTIONAL:
                        value = None
                    else:
                        if i >= n:
                            raise self.error(f"option requires an argument -- '{ch}'")
                        value = args[i]
                        i += 1
                    occ.append(Occurrence(spec, value, "-" + ch))
                    break
                continue
            # operand
            if self.stop_at_positional:
                operands.append(a)
                operands.extend(args[i:])
                break
            operands.append(a)
        return occ, operands

    def parse_into(
        self, argv: Sequence[str], values: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], list[str]]:
        """Parse and apply each option's action; returns ``(values, operands)``.

        Converter exceptions propagate unchanged (the caller knows how to word them).
        """
        occ, operands = self.parse(argv)
        out: dict[str, Any] = {} if values is None else values
        apply_occurrences(occ, out)
        return out, operands


def apply_occurrences(occ: Iterable[Occurrence], out: dict[str, Any]) -> dict[str, Any]:
    """Apply the actions of parsed options to ``out`` (dest → value)."""
    for o in occ:
        spec = o.spec
        if spec.action == "count":
            out[spec.dest] = out.get(spec.dest, 0) + 1
            continue
        if spec.action == "store_const" and o.value is None:
            out[spec.dest] = spec.const
            continue
        value: Any = o.value
        if value is None and spec.arg == OPTIONAL:
            value = spec.const
        elif spec.convert is not None:
            value = spec.convert(value)
        if spec.action == "append":
            out.setdefault(spec.dest, []).append(value)
        else:
            out[spec.dest] = value
    return out
