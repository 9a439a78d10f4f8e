"""sshare: fair-share information per association (tree order, indented by level).

Default columns: Account User RawShares NormShares RawUsage EffectvUsage FairShare; ``-l``
adds NormUsage, LevelFS, GrpTRESMins and TRESRunMins. ``-a`` every user (default: only the
caller's user rows), ``-u`` users, ``-A`` accounts, ``-P``/``-p`` parsable, ``-n`` no header.
"""

from __future__ import annotations

import sys

from muster.cli.client import call, run_main
from muster.cli.getopt import REQUIRED, CliExit, GetoptParser, OptSpec

PARSER = GetoptParser("sshare", [
    OptSpec("a", "all"), OptSpec("A", ("accounts", "account"), REQUIRED),
    OptSpec("e", "helpformat"), OptSpec("h", "help"),
    OptSpec(None, "usage"), OptSpec("l", "long"), OptSpec("m", "partition"),
    OptSpec("M", "cluster", REQUIRED), OptSpec("n", "noheader"), OptSpec("o", "format", REQUIRED),
    OptSpec("p", "parsable"), OptSpec("P", "parsable2"), OptSpec("U", "Users"),
    OptSpec("u", ("users", "user"), REQUIRED), OptSpec("v", "verbose", action="count"),
    OptSpec("V", "version"), OptSpec(None, "json"), OptSpec(None, "yaml"),
], exit_code=1, info="first")

RUN_MINS = "cpu=0,mem=0,energy=0,node=0,billing=0,fs/disk=0,vmem=0,pages=0"
COLS = {
    "account": ("Account", -20), "cluster": ("Cluster", 10), "user": ("User", 10),
    "rawshares": ("RawShares", 10),
    "normshares": ("NormShares", 11), "rawusage": ("RawUsage", 11), "normusage": ("NormUsage", 11),
    "effectvusage": ("EffectvUsage", 13), "fairshare": ("FairShare", 10), "levelfs": ("LevelFS", 10),
    "grptresmins": ("GrpTRESMins", 30), "tresrunmins": ("TRESRunMins", 30),
}
SHORT = ["account", "user", "rawshares", "normshares", "rawusage", "effectvusage", "fairshare"]
LONG = ["account", "user", "rawshares", "normshares", "rawusage", "normusage", "effectvusage",
        "fairshare", "levelfs", "grptresmins", "tresrunmins"]


def cells(r: dict, parsable: bool) -> dict:
    root = r.get("is_root")
    user_row = bool(r["user"])
    acct = r["account"] if parsable else " " * r["depth"] + r["account"]
    lfs = r.get("level_fs")
    return {
        "account": acct, "cluster": r.get("cluster") or "", "user": r["user"],
        "rawshares": "" if root else ("parent" if r["raw_shares"] == -1 else str(r["raw_shares"])),
        "normshares": f"{0.0 if root else r['norm_shares']:.6f}",
        "rawusage": str(int(round(r["raw_usage"]))),
        "normusage": "" if root else f"{r['norm_usage']:.6f}",
        "effectvusage": f"{1.0 if root else r['effectv_usage']:.6f}",
        "fairshare": f"{r['fairshare']:.6f}" if user_row and r.get("fairshare") is not None else "",
        "levelfs": "" if root else ("inf" if lfs is None else f"{lfs:.6f}"),
        "grptresmins": "", "tresrunmins": RUN_MINS,
    }


def help_fields() -> str:
    """``-e``: the field names ``-o`` accepts, in sshare's layout (alphabetical, four to a
    line, each padded to 17 and followed by a space)."""
    names = sorted(title for title, _ in COLS.values())
    return "".join(" ".join(f"{n:<17}" for n in names[i:i + 4]) + "\n"
                   for i in range(0, len(names), 4))


def _cell(v: str, w: int) -> str:
    width = abs(w)
    if len(v) > width:
        v = v[:width - 1] + "+"
    return v.ljust(width) if w < 0 else v.rjust(width)


def _main() -> int:
    opts, operands = PARSER.parse_into(sys.argv[1:])
    if opts.get("helpformat"):
        sys.stdout.write(help_fields())
        return 0
    if operands:
        raise CliExit([f"sshare: error: Unrecognized option: {operands[0]}"], 1)
    reply = call({"op": "sshare"})
    rows = reply["rows"]
    for r in rows:
        r["cluster"] = reply.get("cluster") or ""
    users = set(opts["users"].split(",")) if opts.get("users") else None
    if users and "all" in users:
        users, opts["all"] = None, True
    if not opts.get("all") and users is None:
        users = {reply["user"]}
    if users is not None:
        rows = [r for r in rows if not r["user"] or r["user"] in users]
    if opts.get("accounts"):
        accts = set(opts["accounts"].split(","))
        rows = [r for r in rows if r["account"] in accts]
    if opts.get("Users"):
        rows = [r for r in rows if r["user"]]
    cols = LONG if opts.get("long") else SHORT
    if opts.get("format"):
        cols = [c.strip().lower() for c in opts["format"].split(",") if c.strip()]
        for c in cols:
            if c not in COLS:
                raise CliExit([f"sshare: error: Invalid field requested: \"{c}\""], 1)
    parsable = "P" if opts.get("parsable2") else "p" if opts.get("parsable") else None
    out = []
    if parsable:
        tail = "|" if parsable == "p" else ""
        if not opts.get("noheader"):
            out.append("|".join(COLS[c][0] for c in cols) + tail)
        for r in rows:
            v = cells(r, True)
            out.append("|".join(v[c] for c in cols) + tail)
    else:
        if not opts.get("noheader"):
            out.append("".join(_cell(COLS[c][0], COLS[c][1]) + " " for c in cols))
            out.append("".join("-" * abs(COLS[c][1]) + " " for c in cols))
        for r in rows:
            v = cells(r, False)
            out.append("".join(_cell(v[c], COLS[c][1]) + " " for c in cols))
    sys.stdout.write("".join(line + "\n" for line in out))
    return 0


def main() -> None:
    run_main("sshare", _main)


if __name__ == "__main__":
    main()
