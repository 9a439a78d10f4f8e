"""The mounts of /proc/self/mountinfo, parsed once in one place (standard library only).

A line is ``ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER``; the
mount point escapes blanks and backslashes as octal (``\\040``), decoded here.
"""

from __future__ import annotations

Entry = tuple[str, str, list[str], list[str]]  # (point, fs type, mount options, super options)


def entries(mountinfo: str = "/proc/self/mountinfo") -> list[Entry]:
    """Every well-formed line of *mountinfo*, in order; [] when it cannot be read."""
    out: list[Entry] = []
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return out
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if sep and len(fields) >= 6 and len(rest) >= 3:
            point = fields[4].encode().decode("unicode_escape")  # \040 etc.
            out.append((point, rest[0], fields[5].split(","), rest[2].split(",")))
    return out
