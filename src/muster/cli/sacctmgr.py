"""sacctmgr: view and change accounts, users, associations and QOS.

``sacctmgr [-inPpQ] add|create|modify|update|delete|remove|show|list ENTITY [names]
[where k=v...] [set k=v|k+=v|k-=v...] [format=f[%N],...]``; entities cluster, account,
user, qos, assoc(iation). Changes are committed at once: with ``-i`` as in Slurm, and also
without it (Muster does not ask for confirmation; Slurm asks only on a terminal).
"""

from __future__ import annotations

import sys

from muster.cli.client import call, run_main
from muster.cli.getopt import CliExit, GetoptParser, InfoExit, OptSpec

PARSER = GetoptParser("sacctmgr", [
    OptSpec("i", "immediate"), OptSpec("n", ("noheader", "no_header")),
    OptSpec("o", "oneliner"), OptSpec("P", "parsable2"),
    OptSpec("p", "parsable"), OptSpec("Q", "quiet"), OptSpec("r", "readonly"),
    OptSpec("s", "associations"), OptSpec("v", "verbose", action="count"), OptSpec("V", "version"),
    OptSpec("h", "help"), OptSpec(None, "usage"), OptSpec(None, "json"), OptSpec(None, "yaml"),
], exit_code=1, info="first")

ACTIONS = {"add": "add", "create": "add", "modify": "modify", "update": "modify",
           "delete": "delete", "remove": "delete", "show": "show", "list": "show"}
ENTITIES = {"account": "account", "accounts": "account", "user": "user", "users": "user",
            "qos": "qos", "assoc": "assoc", "association": "assoc", "associations": "assoc",
            "cluster": "cluster", "clusters": "cluster"}

# field name -> (title, width, row key)
FIELDS = {
    "cluster": ("Cluster", 10, "cluster"), "account": ("Account", 10, "account"),
    "user": ("User", 10, "user"), "partition": ("Partition", 10, "partition"),
    "share": ("Share", 9, "share"), "fairshare": ("Share", 9, "share"),
    "priority": ("Priority", 10, "priority"), "grpjobs": ("GrpJobs", 7, "grpjobs"),
    "grptres": ("GrpTRES", 13, "grptres"), "grpsubmit": ("GrpSubmit", 9, "grpsubmit"),
    "grpsubmitjobs": ("GrpSubmit", 9, "grpsubmit"),
    "grpwall": ("GrpWall", 11, "grpwall"), "grptresmins": ("GrpTRESMins", 13, "grptresmins"),
    "maxjobs": ("MaxJobs", 7, "maxjobs"), "maxtres": ("MaxTRES", 13, "maxtres"),
    "maxtresperjob": ("MaxTRES", 13, "maxtres"),
    "maxtrespernode": ("MaxTRESPerNode", 14, "maxtrespernode"),
    "maxsubmit": ("MaxSubmit", 9, "maxsubmit"), "maxsubmitjobs": ("MaxSubmit", 9, "maxsubmit"),
    "maxwall": ("MaxWall", 11, "maxwall"), "maxtresmins": ("MaxTRESMins", 13, "maxtresmins"),
    "qos": ("QOS", 20, "qos"), "defqos": ("Def QOS", 9, "defqos"),
    "defaultqos": ("Def QOS", 9, "defqos"),
    "grptresrunmins": ("GrpTRESRunMin", 13, "grptresrunmins"),
    "parentname": ("Par Name", 10, "parentname"),
    "descr": ("Descr", 20, "descr"), "description": ("Descr", 20, "descr"),
    "org": ("Org", 20, "org"), "organization": ("Org", 20, "org"),
    "defaultaccount": ("Def Acct", 10, "defaultaccount"), "defacct": ("Def Acct", 10, "defaultaccount"),
    "admin": ("Admin", 9, "admin"), "adminlevel": ("Admin", 9, "admin"),
    "name": ("Name", 10, "name"), "gracetime": ("GraceTime", 10, "gracetime"),
    "preempt": ("Preempt", 10, "preempt"),
    "preemptexempttime": ("PreemptExemptTime", 19, "preemptexempttime"),
    "preemptmode": ("PreemptMode", 11, "preemptmode"), "flags": ("Flags", 10, "flags"),
    "usagethres": ("UsageThres", 11, "usagethres"), "usagefactor": ("UsageFactor", 11, "usagefactor"),
    "maxtrespu": ("MaxTRESPU", 13, "maxtrespu"), "maxtresperuser": ("MaxTRESPU", 13, "maxtrespu"),
    "maxjobspu": ("MaxJobsPU", 9, "maxjobspu"), "maxjobsperuser": ("MaxJobsPU", 9, "maxjobspu"),
    "maxsubmitpu": ("MaxSubmitPU", 11, "maxsubmitpu"),
    "maxsubmitjobsperuser": ("MaxSubmitPU", 11, "maxsubmitpu"),
    "maxtrespa": ("MaxTRESPA", 13, "maxtrespa"), "maxjobspa": ("MaxJobsPA", 9, "maxjobspa"),
    "maxsubmitpa": ("MaxSubmitPA", 11, "maxsubmitpa"), "mintres": ("MinTRES", 13, "mintres"),
    "controlhost": ("ControlHost", 15, "controlhost"), "controlport": ("ControlPort", 12, "controlport"),
    "rpc": ("RPC", 5, "rpc"), "id": ("ID", 10, "id"),
}
DEFAULTS = {
    "assoc": "cluster,account,user,partition,share,priority,grpjobs,grptres,grpsubmit,grpwall,"
             "grptresmins,maxjobs,maxtres,maxtrespernode,maxsubmit,maxwall,maxtresmins,qos,"
             "defqos,grptresrunmins",
    "account": "account,descr,org",
    "user": "user,defaultaccount,admin",
    "qos": "name,priority,gracetime,preempt,preemptexempttime,preemptmode,flags,usagethres,"
           "usagefactor,grptres,grptresmins,grptresrunmins,grpjobs,grpsubmit,grpwall,maxtres,"
           "maxtrespernode,maxtresmins,maxwall,maxtrespu,maxjobspu,maxsubmitpu,maxtrespa,"
           "maxjobspa,maxsubmitpa,mintres",
    "cluster": "cluster,controlhost,controlport,rpc,share,grpjobs,grptres,grpsubmit,maxjobs,"
               "maxtres,maxsubmit,maxwall,qos,defqos",
}


def parse_command(words: list[str]) -> dict:
    """``add user alice account=research where ... set ... format=...`` → request parts.
    Raises ValueError with Slurm's message on bad input."""
    if not words:
        raise ValueError("No command given")
    action = ACTIONS.get(words[0].lower())
    if action is None:
        raise ValueError(f"invalid keyword: {words[0]}")
    if len(words) < 2:
        raise ValueError(f"Too few arguments for keyword:{words[0]}")
    entity = ENTITIES.get(words[1].lower())
    if entity is None:
        raise ValueError(f"No valid entity in {action} command\nInput line must include "
                         "\"User\", \"Account\", \"Cluster\", \"QOS\" or \"Association\"")
    names: list[str] = []
    where: list[list[str]] = []
    sets: list[list[str]] = []
    fmt = None
    mode = "where" if action != "add" else "set"
    for w in words[2:]:
        lw = w.lower()
        if lw == "where":
            mode = "where"
            continue
        if lw == "set":
            mode = "set"
            continue
        if lw in ("withassoc", "withcoord", "withdeleted", "tree", "withsubaccounts", "-i"):
            continue
        if "=" not in w:
            names += [n for n in w.split(",") if n]
            continue
        key, _, val = w.partition("=")
        opx = "="
        if key.endswith("+"):
            key, opx = key[:-1], "+="
        elif key.endswith("-"):
            key, opx = key[:-1], "-="
        if len(val) >= 2 and val[0] == val[-1] and val[0] in "'\"":
            val = val[1:-1]
        if key.lower() in ("format", "fmt"):
            fmt = val
            continue
        if key.lower() in ("names", "name") and mode == "where" and action != "add":
            names += [n for n in val.split(",") if n]
            continue
        (sets if mode == "set" else where).append([key, opx, val])
    return {"action": action, "entity": entity, "names": names, "where": where, "set": sets,
            "format": fmt}


def _fields(entity: str, fmt: str | None) -> list[tuple[str, int, str, bool]]:
    out = []
    for item in (fmt or DEFAULTS[entity]).split(","):
        item = item.strip()
        if not item:
            continue
        name, _, width = item.partition("%")
        spec = FIELDS.get(name.lower())
        if spec is None:
            raise CliExit([f"Unknown field '{name}'"], 1)
        title, w, key = spec
        left = False
        if width:
            try:
                w = int(width)
            except ValueError:
                raise CliExit([f"Unknown field '{item}'"], 1) from None
            if w < 0:
                left, w = True, -w
        out.append((title, w, key, left))
    return out


def _cell(v: str, w: int, left: bool) -> str:
    if len(v) > w:
        v = v[:w - 1] + "+" if w > 1 else v[:w]
    return v.ljust(w) if left else v.rjust(w)


def render(rows: list[dict], fields, header: bool, parsable: str | None) -> str:
    lines = []
    if parsable is not None:
        tail = "|" if parsable == "p" else ""
        if header:
            lines.append("|".join(f[0] for f in fields) + tail)
        for r in rows:
            lines.append("|".join(str(r.get(f[2], "")) for f in fields) + tail)
    else:
        if header:
            lines.append("".join(_cell(f[0], f[1], f[3]) + " " for f in fields))
            lines.append("".join("-" * f[1] + " " for f in fields))
        for r in rows:
            lines.append("".join(_cell(str(r.get(f[2], "")), f[1], f[3]) + " " for f in fields))
    return "".join(line + "\n" for line in lines)


def _main() -> int:
    # -o/--oneliner changes nothing: every record is one line already (Slurm 22.05's list
    # output is the same with and without it)
    opts, operands = PARSER.parse_into(sys.argv[1:])
    if not operands:  # sacctmgr would read commands from stdin; Muster answers with its help
        raise InfoExit("sacctmgr", "help")
    try:
        cmd = parse_command(operands)
    except ValueError as exc:
        raise CliExit([f"sacctmgr: error: {exc}" if "\n" not in str(exc) else str(exc)], 1) from None
    fmt = cmd.pop("format")
    from muster.common.errors import RequestError
    if cmd["action"] == "show":
        fields = _fields(cmd["entity"], fmt)
        reply = call({"op": "sacctmgr", **cmd})
        parsable = "P" if opts.get("parsable2") else "p" if opts.get("parsable") else None
        sys.stdout.write(render(reply["rows"], fields, not opts.get("noheader"), parsable))
        return 0
    try:
        reply = call({"op": "sacctmgr", **cmd})
    except RequestError as exc:
        text = exc.message
        if exc.code == "access_denied":
            raise CliExit([f"sacctmgr: error: {text}"], 1) from None
        raise CliExit([text if text.startswith(" ") else f" {text}"], 1) from None
    if not opts.get("quiet"):
        sys.stdout.write("".join(line + "\n" for line in reply.get("lines") or []))
    return int(reply.get("rc") or 0)


def main() -> None:
    run_main("sacctmgr", _main)


if __name__ == "__main__":
    main()
