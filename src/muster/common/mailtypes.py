"""``--mail-type`` / ``--mail-user`` values, checked the same way by sbatch and the controller.

Standard library only (the CLI imports this).

``--mail-type`` is a comma-separated list of Slurm's event names (sbatch(1)); ``ALL`` stands for
BEGIN, END, FAIL, INVALID_DEPEND, REQUEUE and STAGE_OUT, ``TIME_LIMIT`` is 100 % of the time
limit, ``NONE`` clears the list. :func:`parse_mail_type` returns the canonical form (names in
Slurm's display order, comma-separated; ``None`` when nothing is asked).
"""

from __future__ import annotations

__all__ = ["MAIL_TYPES", "MailTypeError", "check_mail_user", "parse_mail_type"]

# Slurm's display order (print_mail_type in slurm_protocol_defs.c)
MAIL_TYPES = ("INVALID_DEPEND", "BEGIN", "END", "FAIL", "REQUEUE", "TIME_LIMIT",
              "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "STAGE_OUT", "ARRAY_TASKS")
_ALL = ("INVALID_DEPEND", "BEGIN", "END", "FAIL", "REQUEUE", "STAGE_OUT")
_USER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+=@-")


class MailTypeError(ValueError):
    """Not a valid ``--mail-type`` / ``--mail-user``."""


def parse_mail_type(value: str) -> str | None:
    """``"begin,end"`` → ``"BEGIN,END"``; ``"NONE"`` → None; raises :class:`MailTypeError`."""
    chosen: set[str] = set()
    for item in value.split(","):
        name = item.strip().upper()
        if name == "NONE":
            chosen.clear()
        elif name == "ALL":
            chosen.update(_ALL)
        elif name in MAIL_TYPES:
            chosen.add(name)
        else:
            raise MailTypeError(f"--mail-type={value} invalid")
    return ",".join(t for t in MAIL_TYPES if t in chosen) or None


def check_mail_user(value: str) -> str:
    """An address or user name MailProg can be given as an argument: letters, digits and
    ``._%+=@-``, not starting with ``-`` (it would be read as an option), at most 256
    characters. Returns it stripped; raises :class:`MailTypeError`."""
    v = value.strip()
    if not v or len(v) > 256 or v[0] == "-" or not set(v) <= _USER_CHARS:
        raise MailTypeError(f"--mail-user={value} invalid")
    return v
