"""sprio: the factors of pending jobs' multifactor priorities.

Default columns: JOBID PARTITION PRIORITY SITE and one column per factor with a non-zero
weight; ``-l`` all factors plus USER and NICE; ``-n`` normalized values; ``-w`` the weights;
``-j``, ``-u``, ``-p`` filter; ``-o`` format (upper-case code = weighted, lower-case =
normalized); ``-h`` no header; ``-S`` sort (default job id).
"""

from __future__ import annotations

import os
import sys

from muster.cli.client import call, check_clusters, run_main
from muster.cli.getopt import REQUIRED, CliExit, GetoptParser, OptSpec

PARSER = GetoptParser("sprio", [
    OptSpec(None, "federation"), OptSpec("h", "noheader"), OptSpec(None, "help"),
    OptSpec(None, "usage"), OptSpec(None, "local"), OptSpec(None, "sibling"),
    OptSpec("j", ("jobs", "job"), REQUIRED), OptSpec("l", "long"), OptSpec("M", "cluster", REQUIRED),
    OptSpec("n", "norm"), OptSpec("o", "format", REQUIRED), OptSpec("p", "partition", REQUIRED),
    OptSpec("S", "sort", REQUIRED), OptSpec("u", ("user", "users"), REQUIRED),
    OptSpec("v", "verbose", action="count"), OptSpec("V", "version"), OptSpec("w", "weights"),
], exit_code=1, info="first")

# code -> (title, factor, normalized?)
CODES = {
    "a": ("AGE", "age", True), "A": ("AGE", "age", False),
    "b": ("ASSOC", "assoc", True), "B": ("ASSOC", "assoc", False),
    "c": ("CLUSTER", None, False), "f": ("FAIRSHARE", "fairshare", True),
    "F": ("FAIRSHARE", "fairshare", False), "i": ("JOBID", None, False),
    "j": ("JOBSIZE", "jobsize", True), "J": ("JOBSIZE", "jobsize", False),
    "N": ("NICE", None, False), "p": ("PARTITION", "partition", True),
    "P": ("PARTITION", "partition", False), "q": ("QOS", "qos", True),
    "Q": ("QOS", "qos", False), "r": ("PARTITION", None, False), "S": ("SITE", None, False),
    "t": ("TRES", None, True), "T": ("TRES", None, False), "u": ("USER", None, False),
    "y": ("PRIORITY", None, True), "Y": ("PRIORITY", None, False),
}
LONG = "%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.11N %.20T"


def default_format(weights: dict, long: bool, norm: bool, sibling: bool = False) -> str:
    """sprio's built-in format; ``sibling`` (--sibling) adds the cluster after the partition
    (not to -l's, as Slurm's)."""
    if long:
        fmt = LONG
    else:
        fmt = "%.15i %9r %.8c %.10Y %.10S" if sibling else "%.15i %9r %.10Y %.10S"
        for key, code in (("age", "A"), ("assoc", "B"), ("fairshare", "F"), ("jobsize", "J"),
                          ("partition", "P"), ("qos", "Q")):
            if weights.get(key):
                fmt += f" %.10{code}"
        if weights.get("tres"):
            fmt += " %.20T"
    if norm:
        for up in "YABFJPQT":
            fmt = fmt.replace(f"%.10{up}", f"%.10{up.lower()}").replace(f"%.20{up}", f"%.20{up.lower()}")
    return fmt


def value(code: str, row: dict) -> str:
    if code == "i":
        return str(row["job_id"])
    if code == "r":
        return row["partition"]
    if code == "u":
        return row["user"]
    if code == "c":
        return row.get("cluster") or ""
    if code == "Y":
        return str(row["priority"])
    if code == "y":
        return f"{row['priority'] / 4294967295:.7f}"
    if code == "S":
        return str(row["site"])
    if code == "N":
        return str(row["nice"])
    if code in ("T", "t"):
        src = row["tres_weighted"] if code == "T" else row["tres_normalized"]
        if code == "T":
            return ",".join(f"{k}={v:.0f}" for k, v in src.items())
        return ",".join(f"{k}={v:.2f}" for k, v in src.items())
    spec = CODES.get(code)
    if spec is None or spec[1] is None:
        return ""
    if spec[2]:
        return f"{row['normalized'][spec[1]]:.7f}"
    return f"{row['weighted'][spec[1]]:.0f}"


def weight_value(code: str, weights: dict) -> str:
    if code == "i":
        return "Weights"
    if code == "S":
        return "1"
    if code in ("T", "t"):
        return weights.get("tres") or ""
    spec = CODES.get(code)
    if spec is None or spec[1] is None:
        return ""
    return str(weights.get(spec[1], 0))


def _main() -> int:
    opts, operands = PARSER.parse_into(sys.argv[1:])
    if operands:
        raise CliExit([f"sprio: error: Unrecognized option: {operands[0]}"], 1)
    from muster.cli.fmt_common import parse_format, render_table
    check_clusters("sprio", opts.get("cluster"))
    # --federation/--local: no federation, every job is local; --sibling: each job has one
    # record, this cluster's, and the cluster column Slurm adds for it
    sibling = opts.get("sibling") or os.environ.get("SPRIO_SIBLING")
    reply = call({"op": "sprio"})
    weights = reply["weights"]
    for r in reply["rows"]:
        r["cluster"] = reply.get("cluster") or ""
    fmt = opts.get("format") or os.environ.get("SPRIO_FORMAT") or default_format(
        weights, bool(opts.get("long")), bool(opts.get("norm")), bool(sibling))
    fields, tail = parse_format(fmt)
    titles = [CODES.get(f.code, ("", None, False))[0] for f in fields]
    if opts.get("weights"):
        wrow = [weight_value(f.code, weights) for f in fields]
        sys.stdout.write("".join(line + "\n" for line in render_table(
            fields, tail, titles, [wrow], show_header=not opts.get("noheader"))))
        return 0
    rows = reply["rows"]
    if opts.get("jobs"):
        want = set()
        for j in opts["jobs"].split(","):
            if j.strip():
                if not j.strip().isdigit():
                    raise CliExit([f"sprio: error: Invalid job id: {j}"], 1)
                want.add(int(j))
        rows = [r for r in rows if r["job_id"] in want]
    if opts.get("user"):
        users = set(opts["user"].split(","))
        rows = [r for r in rows if r["user"] in users]
    if opts.get("partition"):
        parts = set(opts["partition"].split(","))
        rows = [r for r in rows if r["partition"] in parts]
    sort = opts.get("sort") or "i"
    for key in reversed([k for k in sort.split(",") if k]):
        desc = key.startswith("-")
        code = key.lstrip("+-")
        if code in ("i",):
            rows.sort(key=lambda r: (r["job_id"], r["partition"]), reverse=desc)
        elif code in ("Y", "y"):
            rows.sort(key=lambda r: r["priority"], reverse=desc)
        elif code in ("u", "r", "c"):
            fld = {"u": "user", "r": "partition", "c": "cluster"}[code]
            rows.sort(key=lambda r: r[fld], reverse=desc)
    table = [[value(f.code, r) for f in fields] for r in rows]
    sys.stdout.write("".join(line + "\n" for line in render_table(
        fields, tail, titles, table, show_header=not opts.get("noheader"))))
    return 0


def main() -> None:
    run_main("sprio", _main)


if __name__ == "__main__":
    main()
