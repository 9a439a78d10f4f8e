"""Controller operations for accounting and priorities: ``sacctmgr`` (accounts, users,
associations, QOS), ``sprio``, ``sshare``, ``job_script`` (sacct -B/--env-vars), and advance
reservations (``reservations``, ``resv_create``, ``resv_update``, ``resv_delete``).

Changes are for operators (root, the cluster owner, MusterOperators) and are committed before
the reply. Replies carry raw rows; the CLI lays them out (muster.cli.sacctmgr, sprio, sshare).
"""

from __future__ import annotations

from muster.common.errors import RequestError
from muster.controller.accounts import parse_tres, tres_str
from muster.controller.opspec import op
from muster.controller.state import now

NO_PRIV = "Your user doesn't have privilege to perform this action"

QOS_FLAGS = {f.lower(): f for f in (
    "DenyOnLimit", "NoReserve", "OverPartQOS", "PartitionTimeLimit", "PartitionMaxNodes",
    "PartitionMinNodes", "Relative", "NoDecay", "RequiresReservation", "UsageFactorSafe",
    "EnforceUsageThreshold")}

# option name (lower case) -> (record key, kind)
OPTS = {
    "fairshare": ("shares", "shares"), "shares": ("shares", "shares"),
    "priority": ("priority", "int"),
    "maxtresperuser": ("max_tres_per_user", "tres"), "maxtrespu": ("max_tres_per_user", "tres"),
    "maxtresperjob": ("max_tres_per_job", "tres"), "maxtres": ("max_tres_per_job", "tres"),
    "maxtrespj": ("max_tres_per_job", "tres"),
    "maxjobsperuser": ("max_jobs_per_user", "int"), "maxjobspu": ("max_jobs_per_user", "int"),
    "maxsubmitjobsperuser": ("max_submit_jobs_per_user", "int"),
    "maxsubmitpu": ("max_submit_jobs_per_user", "int"),
    "maxsubmitjobspu": ("max_submit_jobs_per_user", "int"),
    "maxwall": ("max_wall", "wall"), "maxwalldurationperjob": ("max_wall", "wall"),
    "grptres": ("grp_tres", "tres"), "grpjobs": ("grp_jobs", "int"),
    "maxjobs": ("max_jobs", "int"), "maxsubmitjobs": ("max_submit_jobs", "int"),
    "maxsubmit": ("max_submit_jobs", "int"),
    "flags": ("flags", "flags"), "preempt": ("preempt", "qoslist"),
    "preemptmode": ("preempt_mode", "mode"), "gracetime": ("grace_time", "secs"),
    "preemptexempttime": ("preempt_exempt_time", "secs"),
    "usagefactor": ("usage_factor", "float"), "qos": ("qos", "qoslist"),
    "defaultqos": ("default_qos", "qosname"), "description": ("description", "str"),
    "organization": ("organization", "str"), "parent": ("parent", "str"),
}
# which options each entity accepts in "set"
ALLOWED = {
    "qos": {"priority", "max_tres_per_user", "max_tres_per_job", "max_jobs_per_user",
            "max_submit_jobs_per_user", "max_wall", "grp_tres", "grp_jobs", "flags", "preempt",
            "preempt_mode", "grace_time", "preempt_exempt_time", "usage_factor", "description"},
    "account": {"shares", "priority", "max_tres_per_job", "max_wall", "grp_tres", "grp_jobs",
                "max_jobs", "max_submit_jobs", "qos", "default_qos", "description",
                "organization", "parent"},
    "assoc": {"shares", "priority", "max_tres_per_job", "max_wall", "grp_tres", "grp_jobs",
              "max_jobs", "max_submit_jobs", "qos", "default_qos"},
}


def _bad(text: str) -> RequestError:
    return RequestError(text, "invalid_request")


def _admin(ctl, uid) -> None:
    ctl.state.ctl = ctl
    if not ctl.is_admin(uid):
        raise RequestError(NO_PRIV, "access_denied")


def _secs(v: str) -> int | None:
    from muster.common.timefmt import parse_time_limit
    v = v.strip()
    if v in ("-1", ""):
        return None
    if v.isdigit():
        return int(v)
    if ":" not in v and "-" not in v:
        raise _bad(f"Invalid time value '{v}'")
    mins = parse_time_limit(v)
    return None if mins is None else mins * 60


def apply_opts(acc, rec: dict, opts: list, entity: str) -> None:
    """Apply ``[[name, op, value], ...]`` (op ``=``, ``+=``, ``-=``) to a record."""
    from muster.common.timefmt import parse_time_limit
    allowed = ALLOWED[entity]
    for name, opx, val in opts:
        spec = OPTS.get(name.lower())
        if spec is None or spec[0] not in allowed:
            raise _bad(f"Unknown option: {name}={val}")
        key, kind = spec
        val = str(val)
        try:
            if kind == "shares":
                rec[key] = -1 if val.lower() == "parent" else (1 if val == "-1" else int(val))
                if rec[key] < -1:
                    raise ValueError
            elif kind == "int":
                n = int(val)
                rec[key] = None if n == -1 else n
                if n < -1:
                    raise ValueError
            elif kind == "float":
                rec[key] = float(val)
            elif kind == "wall":
                rec[key] = None if val.strip() in ("-1", "") else parse_time_limit(val)
            elif kind == "secs":
                rec[key] = _secs(val) or 0
            elif kind == "tres":
                cur = dict(rec.get(key) or {})  # merged; KEY=-1 removes one TRES
                for k, v in parse_tres(val).items():
                    if v == -1:
                        cur.pop(k, None)
                    else:
                        cur[k] = v
                rec[key] = cur
            elif kind == "flags":
                vals = []
                for f in val.split(","):
                    f = f.strip()
                    if not f or f.lower() == "none" or f == "-1":
                        continue
                    if f.lower() not in QOS_FLAGS:
                        raise _bad(f"Unknown QOS flag: {f}")
                    vals.append(QOS_FLAGS[f.lower()])
                rec[key] = _listop(rec.get(key) or [], vals, opx)
            elif kind == "qoslist":
                vals = [q.strip() for q in val.split(",") if q.strip() and q.strip() != "''"]
                for q in vals:
                    if q not in acc.qos:
                        raise _bad(f"Unknown QOS: {q}")
                rec[key] = _listop(rec.get(key) or [], vals, opx)
            elif kind == "qosname":
                if val and val not in acc.qos:
                    raise _bad(f"Unknown QOS: {val}")
                rec[key] = val or None
            elif kind == "mode":
                m = val.upper().split(",")[0]
                if m not in ("OFF", "CANCEL", "REQUEUE", "SUSPEND", "CLUSTER"):
                    raise _bad(f"Unknown preempt mode: {val}")
                rec[key] = None if m == "CLUSTER" else m
            else:
                rec[key] = val
        except ValueError:
            raise _bad(f"Invalid value for {name}: {val}") from None


def _listop(cur: list, vals: list, opx: str) -> list:
    if opx == "+=":
        return list(dict.fromkeys(list(cur) + vals))
    if opx == "-=":
        return [c for c in cur if c not in vals]
    return list(dict.fromkeys(vals))


def _split(opts: list, names: list) -> tuple[dict, list, list]:
    """Pull identity options (name, account, user, partition, ...) out of ``opts``."""
    ident: dict[str, list] = {}
    rest = []
    for name, opx, val in opts:
        k = name.lower()
        if k in ("name", "names", "user", "users", "account", "accounts", "partition",
                 "partitions", "cluster", "clusters", "defaultaccount", "defaultaccounts",
                 "adminlevel", "withassoc", "parents"):
            k = {"names": "name", "users": "user", "accounts": "account", "partitions": "partition",
                 "clusters": "cluster", "defaultaccounts": "defaultaccount"}.get(k, k)
            ident.setdefault(k, [])
            ident[k] += [v for v in str(val).split(",") if v]
        else:
            rest.append([name, opx, val])
    return ident, rest, names


@op("sacctmgr")
def sacctmgr(ctl, msg, uid, gid):
    action = str(msg.get("action") or "").lower()
    entity = str(msg.get("entity") or "").lower()
    names = [str(n) for n in msg.get("names") or [] if n]
    where = [list(x) for x in msg.get("where") or []]
    sets = [list(x) for x in msg.get("set") or []]
    for item in where + sets:
        if not (isinstance(item, list) and len(item) == 3 and all(isinstance(x, str) for x in item)):
            raise _bad("Invalid request")
    entity = {"accounts": "account", "users": "user", "association": "assoc",
              "associations": "assoc", "clusters": "cluster"}.get(entity, entity)
    if entity not in ("account", "user", "qos", "assoc", "cluster"):
        raise _bad("No valid entity in list command\nInput line must include 'Account', "
                   "'User', 'QOS', 'Association' or 'Cluster'")
    if action == "show":
        return {"rows": _show(ctl, entity, where, names)}
    _admin(ctl, uid)
    with ctl.state.store.transaction():
        if action == "add":
            out = _add(ctl, entity, names, where + sets)
        elif action == "modify":
            out = _modify(ctl, entity, names, where, sets)
        elif action == "delete":
            out = _delete(ctl, entity, names, where)
        else:
            raise _bad(f"Invalid action: {action}")
    ctl.state.drop_views()
    ctl.request_schedule()
    return out


# ---- add ---------------------------------------------------------------------------------

def _add(ctl, entity: str, names: list, opts: list) -> dict:
    """``sacctmgr add`` of clusters (a message only), QOS, accounts, users/associations:
    records that exist already are skipped (rc 1, "Nothing new added." when none was new)."""
    acc = ctl.state.accounts
    cluster = ctl.cfg.cluster_name
    ident, rest, _ = _split(opts, names)
    names = names + ident.get("name", [])
    if entity == "cluster":
        return {"lines": [" Adding Cluster(s)"] + [f"  Name           = {n}" for n in names],
                "rc": 0}
    if entity == "qos":
        return _add_qos(acc, names, rest)
    if entity == "account":
        return _add_accounts(acc, cluster, names, ident, rest)
    if entity in ("user", "assoc"):
        return _add_users(ctl, acc, cluster, names, ident, rest)
    raise _bad(f"Invalid entity: {entity}")


def _add_qos(acc, names: list, rest: list) -> dict:
    if not names:
        raise _bad("Need name of QOS to add")
    added = []
    for n in names:
        if n in acc.qos:
            continue
        rec = {"name": n, "description": n, "priority": 0, "flags": [], "preempt": [],
               "preempt_mode": None, "grace_time": 0, "usage_factor": 1.0}
        apply_opts(acc, rec, rest, "qos")
        acc.put_qos(rec)
        added.append(n)
    if not added:
        return {"lines": [" Nothing new added."], "rc": 1}
    return {"lines": [" Adding QOS(s)"] + [f"  {n}" for n in added] + [
        " Settings", f"  Description    = {acc.qos[added[0]].get('description') or added[0]}"],
        "rc": 0}


def _add_accounts(acc, cluster: str, names: list, ident: dict, rest: list) -> dict:
    """Accounts under one parent (``parent=``, the last one given; default ``root``), which
    must exist; an option cannot move an added account elsewhere."""
    if not names:
        raise _bad("Need name of account to add")
    parent = (ident.get("parent") or [None])[0]
    for name, _op, val in rest:
        if name.lower() == "parent":
            parent = val
    parent = parent or "root"
    if parent not in acc.accounts:
        raise _bad(f" Parent account '{parent}' doesn't exist.")
    added = []
    for n in names:
        if n in acc.accounts:
            continue
        rec = {"name": n, "parent": parent, "shares": 1, "description": n,
               "organization": parent if parent != "root" else n, "qos": []}
        apply_opts(acc, rec, rest, "account")
        rec["parent"] = parent
        acc.put_account(rec)
        added.append(n)
    if not added:
        return {"lines": [" Nothing new added."], "rc": 1}
    lines = [" Adding Account(s)"] + [f"  {n}" for n in added]
    lines += [" Settings", "  Description     = Account Name",
              "  Organization    = Parent/Account Name", " Associations"]
    lines += [f"  A = {n:<10} C = {cluster:<10}" for n in added]
    return {"lines": lines, "rc": 0}


def _add_users(ctl, acc, cluster: str, names: list, ident: dict, rest: list) -> dict:
    """One association per (user, account, partition). The accounts and partitions must
    exist. A user has exactly one default association: ``defaultaccount=`` moves it there;
    without it a user who has none gets the first account given."""
    users = names + ident.get("user", [])
    accounts = ident.get("account", [])
    default = (ident.get("defaultaccount") or [None])[0]
    parts = ident.get("partition") or [""]
    if not users:
        raise _bad("Need name of user to add")
    if not accounts and default:
        accounts = [default]
    if not accounts:
        raise _bad(" Need a default account for these users to add.")
    for a in accounts + ([default] if default else []):
        if a not in acc.accounts:
            raise _bad(f" This account '{a}' doesn't exist.\n"
                       "        Contact your admin to add this account.")
    for p in parts:
        if p and p not in ctl.cfg.partitions:
            raise _bad(f" Partition '{p}' doesn't exist on the cluster.")
    added = []
    for u in users:
        has_default = acc.default_account(u) is not None
        for a in accounts:
            for p in parts:
                if (u, a, p) in acc.assocs:
                    continue
                is_def = (default == a) if default else (not has_default and a == accounts[0])
                if is_def:
                    for key, other in list(acc.assocs.items()):
                        if key[0] == u and other.get("is_default"):
                            other = dict(other, is_default=False)
                            acc.put_assoc(other)
                    has_default = True
                rec = {"user": u, "account": a, "partition": p, "shares": 1,
                       "is_default": is_def}
                apply_opts(acc, rec, rest, "assoc")
                acc.put_assoc(rec)
                added.append((u, a, p))
    if not added:
        return {"lines": [" Nothing new added."], "rc": 1}
    lines = [" Adding User(s)"] + [f"  {u}" for u in dict.fromkeys(x[0] for x in added)]
    lines += [" Associations ="]
    lines += [f"  U = {u:<9} A = {a:<10} C = {cluster:<10}" + (f" P = {p}" if p else "")
              for u, a, p in added]
    lines += [" Non Default Settings"]
    for u in dict.fromkeys(x[0] for x in added):
        lines.append(f"  Default Account = {acc.default_account(u)}")
    return {"lines": lines, "rc": 0}


# ---- modify ------------------------------------------------------------------------------

def _match_assocs(acc, ident: dict) -> list[tuple]:
    users = set(ident.get("user", []) + ident.get("name", []))
    accounts = set(ident.get("account", []))
    parts = set(ident.get("partition", []))
    out = []
    for key in sorted(acc.assocs):
        u, a, p = key
        if users and u not in users:
            continue
        if accounts and a not in accounts:
            continue
        if parts and p not in parts:
            continue
        out.append(key)
    return out


def _modify(ctl, entity: str, names: list, where: list, sets: list) -> dict:
    acc = ctl.state.accounts
    cluster = ctl.cfg.cluster_name
    ident, _, _ = _split(where, names)
    ident.setdefault("name", [])
    ident["name"] += names
    sident, srest, _ = _split(sets, [])
    if not sets:
        raise _bad(" You didn't give me anything to set")
    if entity == "qos":
        targets = [n for n in (ident["name"] or list(acc.qos)) if n in acc.qos]
        if not targets:
            return {"lines": [" Nothing modified"], "rc": 1}
        for n in targets:
            rec = dict(acc.qos[n])
            apply_opts(acc, rec, srest, "qos")
            acc.put_qos(rec)
        return {"lines": [" Modified qos..."] + [f"  {n}" for n in targets], "rc": 0}
    if entity == "account" or (entity == "assoc" and not ident.get("user")):
        targets = [n for n in (ident["name"] + ident.get("account", [])) if n in acc.accounts]
        if entity == "assoc" and not targets:
            targets = []
        if not targets:
            return {"lines": [" Nothing modified"], "rc": 1}
        for n in targets:
            rec = dict(acc.accounts[n])
            apply_opts(acc, rec, srest, "account")
            if rec.get("parent") not in acc.accounts or rec.get("parent") == n or (
                    n != "root" and acc._under(rec.get("parent"), n)):
                raise _bad(f" Parent account '{rec.get('parent')}' is not valid for {n}.")
            if n == "root":
                rec["parent"] = None
            acc.put_account(rec)
        return {"lines": [" Modified account associations..."] + [
            f"  C = {cluster:<10} A = {n:<10} of {acc.accounts[n].get('parent') or ''}"
            for n in targets], "rc": 0}
    # users / user associations
    keys = _match_assocs(acc, {"user": ident["name"] + ident.get("user", []),
                               "account": ident.get("account", []),
                               "partition": ident.get("partition", [])})
    if not keys:
        return {"lines": [" Nothing modified"], "rc": 1}
    lines = []
    default = (sident.get("defaultaccount") or [None])[0]
    if default:
        users = sorted({k[0] for k in keys})
        for u in users:
            if not any(k[0] == u and k[1] == default for k in acc.assocs):
                raise _bad(f" User {u} doesn't have an association with account {default}.")
            for key, rec in list(acc.assocs.items()):
                if key[0] == u:
                    acc.put_assoc(dict(rec, is_default=(key[1] == default)))
        lines += [" Modified users..."] + [f"  {u}" for u in users]
    if srest:
        for key in keys:
            rec = dict(acc.assocs[key])
            apply_opts(acc, rec, srest, "assoc")
            acc.put_assoc(rec)
        lines += [" Modified user associations..."] + [
            f"  C = {cluster:<10} A = {a:<10} U = {u:<9}" + (f" P = {p}" if p else "")
            for u, a, p in keys]
    return {"lines": lines, "rc": 0}


# ---- delete ------------------------------------------------------------------------------

def _delete(ctl, entity: str, names: list, where: list) -> dict:
    acc = ctl.state.accounts
    cluster = ctl.cfg.cluster_name
    ident, _, _ = _split(where, names)
    targets = names + ident.get("name", [])
    if entity == "qos":
        gone = [n for n in targets if n in acc.qos]
        if not gone:
            return {"lines": [" Nothing deleted"], "rc": 1}
        for n in gone:
            acc.del_qos(n)
            for q in list(acc.qos.values()):
                if n in (q.get("preempt") or []):
                    acc.put_qos(dict(q, preempt=[x for x in q["preempt"] if x != n]))
        return {"lines": [" Deleting QOS(s)..."] + [f"  {n}" for n in gone], "rc": 0}
    if entity == "account" or (entity == "assoc" and not ident.get("user")):
        gone = [n for n in targets + (ident.get("account", []) if entity == "assoc" else [])
                if n in acc.accounts]
        if "root" in gone:
            raise _bad(" You can not delete the root account.")
        if not gone:
            return {"lines": [" Nothing deleted"], "rc": 1}
        for n in gone:
            kids = [a for a, r in acc.accounts.items() if r.get("parent") == n and a not in gone]
            if kids:
                raise _bad(f" Can't delete account {n}: it has sub-accounts ({', '.join(kids)}).")
        for n in gone:
            for key in [k for k in acc.assocs if k[1] == n]:
                acc.del_assoc(key)
            acc.del_account(n)
        return {"lines": [" Deleting accounts..."] + [f"  {n}" for n in gone], "rc": 0}
    if entity == "cluster":
        raise _bad(" Deleting the cluster of this controller is not supported.")
    keys = _match_assocs(acc, {"user": targets + ident.get("user", []),
                               "account": ident.get("account", []),
                               "partition": ident.get("partition", [])})
    if not keys:
        return {"lines": [" Nothing deleted"], "rc": 1}
    for key in keys:
        acc.del_assoc(key)
    # a user left without a default account gets its first remaining one
    for u in {k[0] for k in keys}:
        mine = acc.user_assocs(u)
        if mine and not any(a.get("is_default") for a in mine):
            acc.put_assoc(dict(mine[0], is_default=True))
    if ident.get("account") or entity == "assoc":
        return {"lines": [" Deleting user associations..."] + [
            f"  C = {cluster:<10} A = {a:<10} U = {u:<9}" for u, a, _ in keys], "rc": 0}
    return {"lines": [" Deleting users..."] + [f"  {u}" for u in dict.fromkeys(k[0] for k in keys)],
            "rc": 0}


# ---- show --------------------------------------------------------------------------------

def _wall(minutes) -> str:
    from muster.common.timefmt import fmt_limit_long
    return "" if minutes is None else fmt_limit_long(minutes)


def _limits_row(rec: dict) -> dict:
    def n(v):
        return "" if v is None else str(v)
    return {"priority": n(rec.get("priority")) if rec.get("priority") else "",
            "grpjobs": n(rec.get("grp_jobs")), "grptres": tres_str(rec.get("grp_tres")),
            "grpsubmit": "", "grpwall": "", "grptresmins": "", "grptresrunmins": "",
            "maxjobs": n(rec.get("max_jobs")), "maxtres": tres_str(rec.get("max_tres_per_job")),
            "maxtrespernode": "", "maxsubmit": n(rec.get("max_submit_jobs")),
            "maxwall": _wall(rec.get("max_wall")), "maxtresmins": ""}


def _show(ctl, entity: str, where: list, names: list) -> list[dict]:
    """``sacctmgr show``: raw rows (the CLI lays them out), filtered by the names given
    (``name=`` or bare), sorted by name; associations in tree order."""
    acc = ctl.state.accounts
    cluster = ctl.cfg.cluster_name
    ident, _, _ = _split(where, names)
    wanted = set(names + ident.get("name", []))
    if entity == "cluster":
        return [{"cluster": cluster, "controlhost": ctl.cfg.slurmctld_addr or "127.0.0.1",
                 "controlport": str(ctl.cfg.slurmctld_port), "rpc": "9728", "share": "1",
                 "qos": "normal", "defqos": "", "grpjobs": "", "grptres": "", "grpsubmit": "",
                 "maxjobs": "", "maxtres": "", "maxsubmit": "", "maxwall": "", "fairshare": "1"}]
    if entity == "qos":
        return [_qos_row(n, q) for n, q in sorted(acc.qos.items()) if not wanted or n in wanted]
    if entity == "account":
        return [{"account": n, "descr": a.get("description") or n,
                 "org": a.get("organization") or n, "parentname": a.get("parent") or "",
                 "fairshare": str(a.get("shares", 1))}
                for n, a in sorted(acc.accounts.items()) if not wanted or n in wanted]
    if entity == "user":
        user_names = sorted({k[0] for k in acc.assocs})
        out = []
        for u in user_names:
            if wanted and u not in wanted:
                continue
            out.append({"user": u, "defaultaccount": acc.default_account(u) or "",
                        "admin": "Administrator" if u == "root" else "None",
                        "account": "", "cluster": cluster})
        return out
    return _show_assocs(acc, cluster, ident, wanted)


def _qos_row(n: str, q: dict) -> dict:
    """One QOS as ``sacctmgr show qos`` fields (unset limits empty)."""
    return {
        "name": n, "description": q.get("description") or n,
        "priority": str(q.get("priority") or 0),
        "gracetime": _wall((q.get("grace_time") or 0) // 60) if q.get("grace_time") else "00:00:00",
        "preempt": ",".join(sorted(q.get("preempt") or [])),
        "preemptexempttime": _wall((q.get("preempt_exempt_time") or 0) // 60)
        if q.get("preempt_exempt_time") else "",
        "preemptmode": q.get("preempt_mode") or "cluster",
        "flags": ",".join(q.get("flags") or []), "usagethres": "",
        "usagefactor": f"{float(q['usage_factor'] if q.get('usage_factor') is not None else 1):.6f}",
        "grptres": tres_str(q.get("grp_tres")), "grptresmins": "", "grptresrunmins": "",
        "grpjobs": "" if q.get("grp_jobs") is None else str(q["grp_jobs"]),
        "grpsubmit": "", "grpwall": "", "maxtres": tres_str(q.get("max_tres_per_job")),
        "maxtrespernode": "", "maxtresmins": "", "maxwall": _wall(q.get("max_wall")),
        "maxtrespu": tres_str(q.get("max_tres_per_user")),
        "maxjobspu": "" if q.get("max_jobs_per_user") is None else str(q["max_jobs_per_user"]),
        "maxsubmitpu": "" if q.get("max_submit_jobs_per_user") is None
        else str(q["max_submit_jobs_per_user"]),
        "maxtrespa": "", "maxjobspa": "", "maxsubmitpa": "", "mintres": "", "id": ""}


def _show_assocs(acc, cluster: str, ident: dict, wanted: set) -> list[dict]:
    """Associations in tree order from ``root``: an account's own row (only when no user or
    partition filter is given), then its user associations sorted, then its sub-accounts
    sorted by name, depth first. ``wanted`` names count as accounts."""
    users = set(ident.get("user", []))
    accounts = set(ident.get("account", []) + list(wanted))
    parts = set(ident.get("partition", []))
    rows: list[dict] = []

    def qos_of(user, account, partition) -> str:
        return ",".join(sorted(acc.allowed_qos(user, account, partition)))

    def share(v) -> str:
        return "parent" if v == -1 else str(v)

    def walk(name: str) -> None:
        a = acc.accounts[name]
        if not users and (not accounts or name in accounts) and not parts:
            qos = ",".join(sorted(a["qos"])) if a.get("qos") else qos_of("", name, "")
            rows.append({"cluster": cluster, "account": name, "user": "", "partition": "",
                         "share": share(a.get("shares", 1)), "fairshare": share(a.get("shares", 1)),
                         "qos": qos, "defqos": a.get("default_qos") or "",
                         "parentname": a.get("parent") or "", **_limits_row(a)})
        for (u, an, p), r in sorted(acc.assocs.items()):
            if an != name:
                continue
            if (users and u not in users) or (accounts and name not in accounts) or (
                    parts and p not in parts):
                continue
            rows.append({"cluster": cluster, "account": name, "user": u, "partition": p,
                         "share": share(r.get("shares", 1)), "fairshare": share(r.get("shares", 1)),
                         "qos": qos_of(u, name, p), "defqos": r.get("default_qos") or "",
                         "parentname": "", **_limits_row(r)})
        for child in sorted(n for n, x in acc.accounts.items() if x.get("parent") == name
                            or (x.get("parent") is None and name == "root" and n != "root")):
            walk(child)

    if "root" in acc.accounts:
        walk("root")
    return rows


# ---- stored batch scripts and environments (sacct -B / --env-vars) --------------------------

@op("job_script")
def job_script(ctl, msg, uid, gid):
    """The batch script (or, with ``env``, the submission environment as ``K=V`` lines) of
    each job record ``job_ids`` name: a job, or every task of an array. Records of other
    users are left out unless the caller is an operator, as slurmdbd narrows a script query
    to the caller's own jobs: a script and its environment may hold secrets. ``text`` is None
    for a job without a script (srun, salloc). Muster keeps every batch script, so no
    AccountingStoreFlags is needed (docs/design.md)."""
    ids = msg.get("job_ids") or []
    if not ids:
        raise _bad("Invalid request: job_script needs job_ids")
    st = ctl.state
    admin = ctl.is_admin(uid)
    # the in-memory job where there is one (a pending array's tasks not yet split off it)
    live = st.jobs
    rows = [r for i in range(0, len(ids), 400)  # (the store's SQL takes each id twice)
            for r in st.store.query_jobs(job_ids=list(ids[i:i + 400]))]
    recs = [r if r["job_id"] not in live else
            live[r["job_id"]].to_record() | {"script_id": live[r["job_id"]].script_id}
            for r in {r["job_id"]: r for r in rows}.values()]
    texts: dict[int, str | None] = {}  # by script id: an array's tasks share one
    out = []
    for r in recs:
        if not admin and r.get("uid") != uid:
            continue
        sid = r.get("script_id") or r["job_id"]
        if sid not in texts:
            got = st.store.get_script(sid)
            texts[sid] = None if got is None else (
                "".join(f"{k}={v}\n" for k, v in got[1].items()) if msg.get("env") else got[0])
        out.append({k: r.get(k) for k in ("job_id", "array_job_id", "array_task_id",
                                          "array_task_str")} | {"text": texts[sid]})
    return {"jobs": out}


# ---- sprio / sshare ------------------------------------------------------------------------

@op("sprio")
def sprio(ctl, msg, uid, gid):
    from dataclasses import replace

    from muster.controller.scheduling import build_snapshot
    from muster.core import priority as pmod
    cfg = ctl.sched_cfg
    if cfg.priority_type != "multifactor":
        raise RequestError("You are not running a supported priority plugin\n(priority/basic).\n"
                           "Only 'priority/multifactor' is supported.", "invalid_request")
    t = now()
    snap, _ = build_snapshot(ctl.state, t)
    acc = ctl.state.accounts
    snap = replace(snap, fairshare=acc.fairshare(t, list(snap.assocs)))
    ctx = pmod.context(snap)
    rows = []
    for jv in snap.pending:
        if jv.blocked:
            continue
        for p in dict.fromkeys(jv.partitions):
            pr = pmod.multifactor(jv, p, t, cfg, ctx)
            tres_w = {k[5:]: v for k, v in pr.weighted.items() if k.startswith("tres/")}
            tres_n = {k[5:]: v for k, v in pr.normalized.items() if k.startswith("tres/")}
            rows.append({"job_id": jv.job_id, "partition": p, "user": jv.user,
                         "account": jv.account, "priority": pr.priority, "site": pr.site, "nice": pr.nice,
                         "weighted": {k: pr.weighted[k] for k in pmod.FACTORS},
                         "normalized": {k: pr.normalized[k] for k in pmod.FACTORS},
                         "tres_weighted": tres_w, "tres_normalized": tres_n})
    weights = {"age": cfg.weight_age, "assoc": cfg.weight_assoc,
               "fairshare": cfg.weight_fairshare, "jobsize": cfg.weight_jobsize,
               "partition": cfg.weight_partition, "qos": cfg.weight_qos,
               "tres": ",".join(f"{k}={v}" for k, v in cfg.weight_tres), "site": 1}
    return {"rows": rows, "weights": weights, "now": t, "cluster": ctl.cfg.cluster_name}


@op("sshare")
def sshare(ctl, msg, uid, gid):
    from muster.core import fairshare as fsmod
    t = now()
    acc = ctl.state.accounts
    assocs = acc.assoc_views(t)
    flags = {f.upper() for f in ctl.cfg.priority_flags or ()}
    algo = "classic" if "NO_FAIR_TREE" in flags else "fair_tree"
    rows = fsmod.sshare(assocs, algo, float(ctl.cfg.fair_share_dampening_factor or 1))
    total = sum(a.raw_usage for a in assocs)
    depth: dict[tuple, int] = {}
    parent = {}
    for a in assocs:
        parent[(a.account, a.user)] = (a.account, None) if a.user is not None else (
            (a.parent or "root", None) if a.account != "root" else None)

    def d(key) -> int:
        if key in depth:
            return depth[key]
        p = parent.get(key)
        depth[key] = 0 if p is None else d(p) + 1
        return depth[key]
    # Slurm lists an account's users before its sub-accounts
    kids: dict = {}
    for r in rows:
        key = (r.account, r.user or None)
        kids.setdefault(parent.get(key), []).append(r)
    ordered = []

    def walk(key) -> None:
        ch = kids.get(key, [])
        for r in sorted(ch, key=lambda x: (not x.user, x.user or x.account)):
            ordered.append(r)
            if not r.user:
                walk((r.account, None))
    walk(None)
    if len(ordered) == len(rows):
        rows = ordered
    out = []
    for r in rows:
        key = (r.account, r.user or None)
        out.append({"account": r.account, "user": r.user, "depth": d(key),
                    "raw_shares": r.raw_shares, "norm_shares": r.norm_shares,
                    "raw_usage": r.raw_usage,
                    "norm_usage": r.raw_usage / total if total > 0 else 0.0,
                    "effectv_usage": r.effectv_usage, "fairshare": r.fairshare,
                    "level_fs": None if r.level_fs == float("inf") else r.level_fs,
                    "is_root": r.account == "root" and not r.user and d(key) == 0})
    from muster.controller.state import identity
    return {"rows": out, "user": identity(uid)["user"], "now": t,
            "cluster": ctl.cfg.cluster_name}


# ---- reservations ----------------------------------------------------------------------------

@op("reservations")
def reservations(ctl, msg, uid, gid):
    t = now()
    recs = ctl.state.reservations.records(t)
    if msg.get("name"):
        recs = [r for r in recs if r["name"] == msg["name"]]
    return {"reservations": recs, "now": t}


def _resv_spec(msg) -> dict:
    spec = msg.get("spec")
    if not isinstance(spec, dict):
        raise _bad("Invalid reservation request")
    for k in ("users", "accounts", "flags", "nodes"):
        v = spec.get(k)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise _bad(f"Invalid {k}")
    for k in ("start", "end", "duration", "node_cnt"):
        v = spec.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise _bad(f"Invalid {k}")
    if spec.get("tres") is not None and not isinstance(spec["tres"], dict):
        raise _bad("Invalid TRES")
    return spec


@op("resv_create")
def resv_create(ctl, msg, uid, gid):
    _admin(ctl, uid)
    name = ctl.state.reservations.create(_resv_spec(msg), now())
    ctl.request_schedule()
    return {"name": name}


@op("resv_update")
def resv_update(ctl, msg, uid, gid):
    _admin(ctl, uid)
    ctl.state.reservations.update(_resv_spec(msg), now())
    ctl.request_schedule()
    return {}


@op("resv_delete")
def resv_delete(ctl, msg, uid, gid):
    _admin(ctl, uid)
    name = msg.get("name")
    if not isinstance(name, str):
        raise _bad("Invalid reservation name")
    ctl.state.reservations.delete(name)
    ctl.request_schedule()
    return {}
