"""sinfo: view partitions and nodes."""

from __future__ import annotations

import os
import sys
import time

from muster.cli.client import call, run_main
from muster.cli.getopt import REQUIRED, CliExit, GetoptParser, OptSpec

PARSER = GetoptParser("sinfo", [
    OptSpec("a", "all"), OptSpec("d", "dead"), OptSpec("e", "exact"), OptSpec("h", "noheader"),
    OptSpec(None, "help"), OptSpec(None, "usage"), OptSpec("i", "iterate", REQUIRED),
    OptSpec("l", "long"), OptSpec("M", "clusters", REQUIRED), OptSpec("n", "nodes", REQUIRED),
    OptSpec("N", "Node"), OptSpec("o", "format", REQUIRED), OptSpec("O", "Format", REQUIRED),
    OptSpec("p", "partition", REQUIRED), OptSpec("r", "responding"), OptSpec("R", "list-reasons"),
    OptSpec("s", "summarize"), OptSpec("S", "sort", REQUIRED), OptSpec("t", ("states", "state"), REQUIRED),
    OptSpec("T", "reservation"), OptSpec("v", "verbose", action="count"), OptSpec("V", "version"),
    OptSpec(None, "json"), OptSpec(None, "yaml"), OptSpec(None, "local"), OptSpec(None, "federation"),
    OptSpec(None, "hide", dest="all", const=False), OptSpec(None, "noconvert"),
], exit_code=1, info="first")


def _main() -> int:
    opts, operands = PARSER.parse_into(sys.argv[1:])
    env = os.environ
    if operands:
        raise CliExit([f"sinfo: error: Unrecognized option: {operands[0]}",
                       'Try "sinfo --help" for more information'], 1)
    from muster.cli import fmt_sinfo
    parts_filter = [p for p in (opts.get("partition") or env.get("SINFO_PARTITION") or "").split(",") if p]
    states = None
    if opts.get("states"):
        states = [s for s in opts["states"].lower().split(",") if s]
    iterate = opts.get("iterate")
    while True:
        parts = call({"op": "partitions"})["partitions"]
        reply = call({"op": "nodes"})
        nodes = reply["nodes"]
        if opts.get("responding"):
            nodes = [n for n in nodes if "NOT_RESPONDING" not in n["flags"]]
        if opts.get("dead"):
            nodes = [n for n in nodes if "NOT_RESPONDING" in n["flags"] or n["state"] == "DOWN"]
        if opts.get("json") or opts.get("yaml"):
            from muster.common import fmt_json
            doc = fmt_json.sinfo_json(parts, nodes, reply["now"], command=["sinfo", *sys.argv[1:]])
            sys.stdout.write(fmt_json.dumps(doc) if opts.get("json") else fmt_json.to_yaml(doc))
            return 0
        try:
            out = fmt_sinfo.render(
                parts, nodes,
                fmt=opts.get("format") or (None if opts.get("Format") else env.get("SINFO_FORMAT")),
                fmt_long=opts.get("Format"), node_oriented=bool(opts.get("Node")),
                long=bool(opts.get("long")), summarize=bool(opts.get("summarize")),
                reasons=bool(opts.get("list_reasons")), noheader=bool(opts.get("noheader")),
                now=reply["now"], partition_filter=parts_filter or None,
                node_filter=opts.get("nodes"), state_filter=states,
                hidden=bool(opts["all"] if "all" in opts else env.get("SINFO_ALL")))
        except ValueError as exc:
            raise CliExit([f"sinfo: error: Invalid field or state: {exc}"], 1) from None
        sys.stdout.write(out)
        if not iterate:
            return 0
        sys.stdout.flush()
        time.sleep(max(1, int(iterate)))
        sys.stdout.write("\n")


def main() -> None:
    run_main("sinfo", _main)


if __name__ == "__main__":
    main()
