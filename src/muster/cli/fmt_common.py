"""Field engine shared by squeue and sinfo (stdlib only, cheap to import).

Format strings (``-o``): ``%[.][size|#]code`` fields separated only by the literal text
between them; ``.`` right-justifies, ``size`` pads *and truncates* both value and header,
no size means natural width, ``#`` means "width of the longest value/header" (sinfo).
``%%`` is a literal percent sign.  An unknown code produces an empty field (Slurm logs an
error and carries on); the characters after the code letter are plain literal text, which
is why ``squeue -o %bogus`` prints the ``%b`` field followed by ``ogus``.

Long formats (``-O``): ``name[:[.]size][suffix],...`` (names case-insensitive), default
width 20, left-justified, no separator other than an explicit suffix.
"""
from __future__ import annotations

__all__ = ["Field", "parse_format", "parse_format_long", "pad", "render_table"]


class Field:
    __slots__ = ("code", "width", "right", "natural_max", "prefix", "suffix")

    def __init__(self, code, width=None, right=False, natural_max=False, prefix="", suffix=""):
        self.code = code            # one-letter code (-o) or canonical -O name
        self.width = width          # int or None (natural width)
        self.right = right          # right-justify
        self.natural_max = natural_max  # '%#': width of longest value (and header)
        self.prefix = prefix        # literal text printed before the field
        self.suffix = suffix        # literal text printed after the field

    def __repr__(self):  # pragma: no cover - debugging aid
        return (f"Field({self.code!r}, width={self.width}, right={self.right}, "
                f"max={self.natural_max}, prefix={self.prefix!r}, suffix={self.suffix!r})")


def parse_format(fmt: str) -> tuple[list[Field], str]:
    """Parse a ``-o`` string into fields (each carrying the literal text before it) and
    the trailing literal text."""
    fields: list[Field] = []
    lit: list[str] = []
    i, n = 0, len(fmt)
    while i < n:
        c = fmt[i]
        if c != "%":
            lit.append(c)
            i += 1
            continue
        if i + 1 < n and fmt[i + 1] == "%":
            lit.append("%")
            i += 2
            continue
        j = i + 1
        right = False
        natural_max = False
        if j < n and fmt[j] == ".":
            right = True
            j += 1
        if j < n and fmt[j] == "#":
            natural_max = True
            j += 1
        if j < n and fmt[j] == "." and not right:
            right = True
            j += 1
        k = j
        while k < n and fmt[k].isdigit():
            k += 1
        width = int(fmt[j:k]) if k > j else None
        if k >= n:  # dangling '%' / '%.5': nothing to print
            break
        fields.append(Field(fmt[k], width, right, natural_max, prefix="".join(lit)))
        lit = []
        i = k + 1
    return fields, "".join(lit)


def parse_format_long(spec: str, names: dict[str, str]) -> list[Field]:
    """Parse a ``-O`` string. ``names`` maps lower-case names to canonical keys; unknown
    names raise ValueError(name)."""
    fields: list[Field] = []
    for item in spec.split(","):
        if not item:
            continue
        name, sep, rest = item.partition(":")
        key = names.get(name.strip().lower())
        if key is None:
            raise ValueError(name)
        width, right, suffix = 20, False, ""
        if sep:
            j = 0
            if rest[:1] == ".":
                right = True
                j = 1
            k = j
            while k < len(rest) and rest[k].isdigit():
                k += 1
            if k > j:
                width = int(rest[j:k])
            suffix = rest[k:]
        fields.append(Field(key, width, right, False, "", suffix))
    return fields


def pad(value: str, width: int | None, right: bool) -> str:
    """Truncate to ``width`` then justify; ``None`` keeps natural width."""
    if width is None:
        return value
    if len(value) > width:
        value = value[:width]
    return value.rjust(width) if right else value.ljust(width)


def render_table(fields: list[Field], tail: str, titles: list[str], rows: list[list[str]],
                 show_header: bool = True, min_max_width: dict | None = None) -> list[str]:
    """Render the header (``titles``, one per field) and the rows (one string per field).
    ``%#`` fields get the width of the longest value or title (at least
    ``min_max_width[code]`` when given)."""
    widths: list[int | None] = []
    for idx, f in enumerate(fields):
        if f.natural_max:
            w = max([len(r[idx]) for r in rows] + [len(titles[idx])])
            if min_max_width and f.code in min_max_width:
                w = max(w, min_max_width[f.code])
            widths.append(w)
        else:
            widths.append(f.width)

    # One str.format template for the whole line: "{0:>18.18}" pads/justifies and truncates
    # exactly like pad(), in C, once per row (5,000 squeue rows: ~4x faster than per-field).
    def esc(text: str) -> str:
        return text.replace("{", "{{").replace("}", "}}")

    parts = []
    for idx, f in enumerate(fields):
        width = widths[idx]
        spec = "" if width is None else f"{'>' if f.right else '<'}{width}.{width}"
        parts.append(f"{esc(f.prefix)}{{{idx}:{spec}}}{esc(f.suffix)}")
    template = "".join(parts) + esc(tail)
    fmt = template.format
    out = [fmt(*titles)] if show_header else []
    out.extend(fmt(*r) for r in rows)
    return out
