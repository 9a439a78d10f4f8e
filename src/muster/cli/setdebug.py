"""``scontrol setdebug LEVEL`` and ``scontrol setdebugflags [+|-]FLAG[,FLAG...]``.

The argument is checked here first, with scontrol's messages (Slurm 22.05.8's, captured in
tests/data/slurm-ref/sdiag.txt), then again by the controller, which also decides who may:
root and SlurmUser. Success prints nothing, as scontrol.
"""

from __future__ import annotations

from muster.cli.client import call
from muster.cli.getopt import CliExit, GetoptParser
from muster.common import logsetup


def posix_parse(parser: GetoptParser, argv: list[str]) -> tuple[dict, list[str]] | None:
    """scontrol's argv parsed up to its first operand only, when that operand is
    ``setdebugflags`` (``-Steps`` is then its argument, not options); None otherwise."""
    stop = GetoptParser(parser.prog, parser.specs, stop_at_positional=True,
                        exit_code=parser.exit_code, hint=parser.hint, info=parser.info)
    opts, operands = stop.parse_into(argv)
    return (opts, operands) if operands and operands[0].lower() == "setdebugflags" else None


def _one_arg(cmd: str, args: list[str]) -> str:
    if not args:
        raise CliExit([f"too few arguments for keyword:{cmd}"], 1)
    if len(args) > 1:
        raise CliExit([f"too many arguments for keyword:{cmd}"], 1)
    return args[0]


def _send(msg: dict, what: str) -> int:
    from muster.common.errors import RequestError
    try:
        call(msg)
    except RequestError as exc:
        raise CliExit([f"{what} error: {exc.message}"], 1) from None
    return 0


def setdebug(args: list[str]) -> int:
    arg = _one_arg("setdebug", args)
    level = logsetup.parse_level(arg)
    if level is None:
        raise CliExit([f"invalid debug level: {arg}"], 1)
    return _send({"op": "setdebug", "level": level}, "slurm_set_debug_level")


def setdebugflags(args: list[str]) -> int:
    arg = _one_arg("setdebugflags", args)
    if not arg or arg[0] not in "+-":
        raise CliExit([f"invalid debug flag: {arg}", "Usage: setdebugflags [+|-]NAME"], 1)
    names = arg[1:].split(",")
    bad = next((n for n in names if logsetup.flag_name(n) is None), None)
    if bad is not None:
        raise CliExit([f"scontrol: error: Invalid DebugFlag: {bad}",
                       f"invalid debug flag: {arg}"], 1)
    key = "add" if arg[0] == "+" else "remove"
    return _send({"op": "setdebugflags", key: names}, "slurm_set_debug_flags")
