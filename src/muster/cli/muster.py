"""muster: set up and manage a local cluster (``up``, ``down``, ``status``).

``muster up`` writes a slurm.conf/gres.conf into the state directory, a cluster key (mode
0600), a pointer that every command finds without environment variables
(``~/.config/muster/slurm.conf``, and ``/etc/muster/slurm.conf`` when run as root), then starts
``musterctld`` and one ``musterd`` per node, each node with its own loopback address
(node i → 127.0.1.i), and returns once every node has registered.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from muster.cli.client import run_main
from muster.cli.getopt import CliExit

PIDS = "muster.pids"


def default_state_dir() -> str:
    if os.getuid() == 0:
        return "/var/lib/muster"
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "muster")


def node_addr(i: int) -> str:
    """node i (1-based) → a distinct loopback address, 127.0.1.1 onwards."""
    j = i - 1
    return f"127.0.{1 + j // 254}.{1 + j % 254}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pointer_paths() -> list[str]:
    from muster.config.locate import user_config_path
    paths = [user_config_path()]
    if os.getuid() == 0:
        paths.append("/etc/muster/slurm.conf")
    return paths


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def _read_pids(state: str) -> dict | None:
    try:
        with open(os.path.join(state, PIDS)) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _bin(name: str) -> str:
    here = os.path.dirname(os.path.abspath(sys.argv[0]))
    cand = os.path.join(here, name)
    return cand if os.access(cand, os.X_OK) else name


def _spawn(argv: list[str], log: str) -> int:
    with open(log, "ab") as fh:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh,
                             start_new_session=True, close_fds=True)
    return p.pid


def _ping(conf: str) -> dict | None:
    from muster.cli import client
    old = os.environ.get("MUSTER_CONF")
    os.environ["MUSTER_CONF"] = conf
    try:
        return client.call({"op": "ping"})
    except Exception:
        return None
    finally:
        if old is None:
            os.environ.pop("MUSTER_CONF", None)
        else:
            os.environ["MUSTER_CONF"] = old


def _parse_partitions(spec: str) -> list[tuple[str, str | None]]:
    out = []
    for item in [x for x in spec.split(",") if x]:
        name, _, maxtime = item.partition(":")
        if not name.replace("_", "").replace("-", "").isalnum():
            raise CliExit([f"muster: error: invalid partition name {name!r}"], 1)
        out.append((name, maxtime or None))
    if not out:
        raise CliExit(["muster: error: --partitions needs at least one name"], 1)
    return out


def _detect_gpus() -> tuple[int, str | None]:
    """Real GPUs through NVML when the library is there; else none."""
    try:
        import pynvml  # nvidia-ml-py
        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)) if n else None
        pynvml.nvmlShutdown()
        if isinstance(name, bytes):
            name = name.decode()
        gtype = name.split()[-1].lower() if name else None
        return n, gtype
    except Exception:
        return 0, None


NVIDIA_MAJOR = 195  # the NVIDIA driver's character-device major


def _emulated_gpu_files(state: str, names: list[str], count: int) -> dict[str, str]:
    """Give each node's emulated GPUs real device nodes, for gres.conf ``File=``: character
    devices ``<state>/dev/<node>/nvidia<i>`` (NVIDIA's major 195, minor i, mode 0666), so a
    device cgroup (cgroup.conf ConstrainDevices) can allow or deny them like real GPUs. With no
    NVIDIA driver an open() of an allowed one fails with ENXIO (no driver behind the number);
    one the job's cgroup denies fails with EPERM before the driver is asked.

    Returns {node: File expression}; {} after a note on stderr when device nodes cannot be
    made here (not root, a nodev file system, a path gres.conf cannot spell): the nodes then
    keep Count= lines, i.e. GPUs without device files, which nothing can confine."""
    import stat
    from muster.common import hostlist
    from muster.common.securefs import UnsafePath, ensure_private_dir
    base = os.path.join(state, "dev")
    try:
        if os.statvfs(state).f_flag & os.ST_NODEV:
            raise PermissionError(f"{state} is on a file system mounted nodev")
        ensure_private_dir(base, "GPU device directory")
        out = {}
        for name in names:
            d = os.path.join(base, name)
            ensure_private_dir(d, "GPU device directory")
            paths = [_mknod_gpu(os.path.join(d, f"nvidia{i}"), i, stat) for i in range(count)]
            expr = hostlist.compress(paths)
            if hostlist.expand(expr) != paths:
                raise ValueError(f"gres.conf cannot spell the path {paths[0]}")
            out[name] = expr
        return out
    except (OSError, UnsafePath, ValueError) as exc:
        sys.stderr.write(f"muster: note: emulated GPUs get no device files ({exc}); gres.conf "
                         "keeps Count= lines and ConstrainDevices cannot confine them\n")
        return {}


def _real_gpu_files(names: list[str], count: int) -> dict[str, str]:
    """Real NVIDIA GPUs: the first ``count`` NVML devices' files (/dev/nvidia<minor>) for
    every node (nodes emulated on one host share its GPUs); {} when NVML or a file is
    missing (Count= lines then, as before)."""
    from muster.common import hostlist
    from muster.config.gresfiles import nvml_minors
    paths = [f"/dev/nvidia{m}" for m in nvml_minors()[:count]]
    if len(paths) < count or not all(os.path.exists(p) for p in paths):
        return {}
    expr = hostlist.compress(paths) if hostlist.expand(hostlist.compress(paths)) == paths \
        else ",".join(paths)
    return dict.fromkeys(names, expr)


def _mknod_gpu(path: str, minor: int, stat) -> str:
    """Make (or keep, when it already is one) character device 195:minor at path, mode 0666."""
    want = os.makedev(NVIDIA_MAJOR, minor)
    try:
        st = os.lstat(path)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == want:
            os.chmod(path, 0o666)
            return path
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.mknod(path, stat.S_IFCHR | 0o666, want)
    os.chmod(path, 0o666)  # mknod's mode is filtered by the umask
    return path


CGROUP_CONF = """\
# Written by `muster up`: confine each job to what it was given (Slurm's task/cgroup).
ConstrainCores=yes
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
AllowedSwapSpace=0
ConstrainDevices=yes
"""


def _confinement(glob: dict, wanted: bool = True) -> str:
    """Slurm's confinement settings when this node can confine jobs (root, a writable cgroup
    hierarchy) and ``wanted`` (not ``--no-confine``): ProctrackType/TaskPlugin into ``glob``
    and the cgroup.conf text. Otherwise process tracking by session (proctrack/pgid) and no
    constraints; the agent says why."""
    from muster.agent.cgroup import CgroupError, open_hierarchy
    if not wanted:
        glob.update({"ProctrackType": "proctrack/pgid", "TaskPlugin": "task/none"})
        return "# Written by `muster up --no-confine`: jobs are not confined.\n"
    try:
        able = os.geteuid() == 0 and open_hierarchy() is not None
    except (CgroupError, OSError):
        able = False
    if not able:
        glob.update({"ProctrackType": "proctrack/pgid", "TaskPlugin": "task/none"})
        return "# Written by `muster up`: this node cannot confine jobs (not root, or no " \
               "writable cgroup hierarchy).\n"
    glob.update({"ProctrackType": "proctrack/cgroup", "TaskPlugin": "task/cgroup,task/affinity"})
    return CGROUP_CONF


def cmd_up(args) -> int:
    from muster.common import auth
    from muster.config import load, render
    from muster.common.securefs import UnsafePath, ensure_private_dir
    state = os.path.abspath(args.state_dir or default_state_dir())
    try:
        ensure_private_dir(state, "state directory")
    except UnsafePath as exc:
        raise CliExit([f"muster: error: {exc}"], 1) from None
    pids = _read_pids(state)
    if pids and _alive(pids.get("controller")):
        raise CliExit([f"muster: error: a cluster is already running from {state} "
                       f"(musterctld pid {pids['controller']}); run `muster down` first"], 1)
    key = os.path.join(state, "muster.key")
    if not os.path.lexists(key):
        auth.generate_key(key)
    try:
        auth.load_key(key)  # an existing key is reused only if it is ours and private
    except auth.CredentialError as exc:
        raise CliExit([f"muster: error: {exc}"], 1) from None
    if args.config:
        conf = os.path.abspath(args.config)
        cfg = load(conf)
    else:
        conf = os.path.join(state, "slurm.conf")
        real_gpus, gtype = _detect_gpus()
        gpus = args.gpus_per_node if args.gpus_per_node is not None else (real_gpus or 8)
        cpus, mem = args.cpus_per_node, args.mem_per_node
        nodes = []
        node_names = [f"node{i}" for i in range(1, args.nodes + 1)]
        files = {} if not gpus else (_real_gpu_files(node_names, gpus) if real_gpus else
                                     _emulated_gpu_files(state, node_names, gpus))
        for i in range(1, args.nodes + 1):
            n = {"NodeName": f"node{i}", "NodeAddr": node_addr(i), "NodeHostname": f"node{i}",
                 "CPUs": cpus, "RealMemory": mem, "State": "UNKNOWN"}
            if gpus:
                n["Gres"] = f"gpu:{gtype}:{gpus}" if (gtype and real_gpus) else f"gpu:{gpus}"
            if f"node{i}" in files:
                n["GresConf"] = [{"Name": "gpu", "Type": gtype if real_gpus else None,
                                  "File": files[f"node{i}"]}]
            nodes.append(n)
        names = f"node[1-{args.nodes}]" if args.nodes > 1 else "node1"
        parts = []
        for k, (pname, maxtime) in enumerate(_parse_partitions(args.partitions)):
            p = {"PartitionName": pname, "Nodes": names, "Default": k == 0, "State": "UP",
                 "MaxTime": maxtime or "INFINITE"}
            parts.append(p)
        glob = {"SlurmctldHost": "localhost(127.0.0.1)", "SlurmctldPort": _free_port(),
                "StateSaveLocation": state, "SlurmdSpoolDir": os.path.join(state, "spool", "%n"),
                "AuthInfo": f"key={key}", "KillWait": 30, "MinJobAge": 300,
                "SlurmdTimeout": 12, "ReturnToService": 2, "MaxArraySize": 10001,
                "DefMemPerCPU": max(1, mem // max(1, cpus)), "SelectType": "select/cons_tres",
                "SelectTypeParameters": "CR_Core_Memory"}
        if gpus:
            glob["GresTypes"] = "gpu"
        cgroup_conf = _confinement(glob, not args.no_confine)
        slurm_conf, gres_conf = render("muster", nodes, parts, glob)
        with open(conf, "w") as fh:
            fh.write(slurm_conf)
        with open(os.path.join(state, "gres.conf"), "w") as fh:
            fh.write(gres_conf)
        with open(os.path.join(state, "cgroup.conf"), "w") as fh:
            fh.write(cgroup_conf)
        cfg = load(conf)
    for ptr in ([] if args.no_link else _pointer_paths()):
        os.makedirs(os.path.dirname(ptr), exist_ok=True)
        if os.path.lexists(ptr):
            os.unlink(ptr)
        os.symlink(conf, ptr)
    logdir = os.path.join(state, "log")
    os.makedirs(logdir, exist_ok=True)
    ctld = _spawn([_bin("musterctld"), "-f", conf, "-L", os.path.join(logdir, "musterctld.log")],
                  os.path.join(logdir, "musterctld.out"))
    record = {"controller": ctld, "agents": {}, "config": conf, "state_dir": state}
    _write_pids(state, record)
    deadline = time.time() + args.timeout
    while _ping(conf) is None:
        if not _alive(ctld):
            raise CliExit([f"muster: error: musterctld exited during start-up; see {logdir}/musterctld.*"], 1)
        if time.time() > deadline:
            raise CliExit(["muster: error: musterctld did not answer in time"], 1)
        time.sleep(0.05)
    if args.emulate:
        from muster.common.hostlist import compress
        names = compress(list(cfg.nodes))
        pid = _spawn([_bin("musterd"), "-f", conf, "-N", names, "-L",
                      os.path.join(logdir, "musterd.log")], os.path.join(logdir, "musterd.out"))
        record["agents"] = {name: pid for name in cfg.nodes}
    else:
        for name in cfg.nodes:
            record["agents"][name] = _spawn(
                [_bin("musterd"), "-f", conf, "-N", name, "-L", os.path.join(logdir, f"musterd-{name}.log")],
                os.path.join(logdir, f"musterd-{name}.out"))
    _write_pids(state, record)
    while True:
        info = _ping(conf)
        if info and info["nodes_up"] >= len(cfg.nodes):
            break
        dead = [n for n, pid in record["agents"].items() if not _alive(pid)]
        if dead:
            raise CliExit([f"muster: error: musterd for {', '.join(dead)} exited; see {logdir}"], 1)
        if time.time() > deadline:
            raise CliExit(["muster: error: not every node registered in time"], 1)
        time.sleep(0.05)
    api = _start_restd(state, conf, logdir, record, deadline)
    print(f"Muster cluster up: {len(cfg.nodes)} nodes, config {conf}")
    if api:
        print(f"REST API:   {api['url']}  (dashboard {api['dashboard']}, metrics {api['metrics']})")
    return 0


RESTD_INFO = "musterrestd.json"


def _start_restd(state: str, conf: str, logdir: str, record: dict, deadline: float) -> dict | None:
    """Start musterrestd (REST API, /metrics, dashboard) on a free loopback port when its
    dependencies (the ``api`` extra) are installed; MUSTER_NO_API=1 skips it."""
    import importlib.util
    info_path = os.path.join(state, RESTD_INFO)
    if os.path.exists(info_path):
        os.unlink(info_path)
    if os.environ.get("MUSTER_NO_API") or not all(
            importlib.util.find_spec(m) for m in ("starlette", "uvicorn", "jwt", "prometheus_client")):
        return None
    port = _free_port()
    pid = _spawn([_bin("musterrestd"), "-f", conf, "--listen", f"127.0.0.1:{port}",
                  "-L", os.path.join(logdir, "musterrestd.log")],
                 os.path.join(logdir, "musterrestd.out"))
    record["restd"] = pid
    _write_pids(state, record)
    while True:
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if not _alive(pid):
            raise CliExit([f"muster: error: musterrestd exited during start-up;"
                           f" see {logdir}/musterrestd.*"], 1)
        if time.time() > deadline:
            raise CliExit(["muster: error: musterrestd did not start in time"], 1)
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    info = {"pid": pid, "host": "127.0.0.1", "port": port, "url": url,
            "dashboard": f"{url}/dashboard/", "metrics": f"{url}/metrics",
            "openapi": f"{url}/openapi.json"}
    tmp = info_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(info, fh)
    os.replace(tmp, info_path)
    return info


def _write_pids(state: str, record: dict) -> None:
    tmp = os.path.join(state, PIDS + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(record, fh)
    os.replace(tmp, os.path.join(state, PIDS))


def _running_state_dir(args) -> str:
    """--state-dir, else the state dir of the cluster the commands would talk to."""
    if args.state_dir:
        return os.path.abspath(args.state_dir)
    from muster.cli.client import _scan_conf, config_path
    conf = config_path()
    if conf:
        st = _scan_conf(conf, ("statesavelocation",)).get("statesavelocation")
        if st and os.path.exists(os.path.join(st, PIDS)):
            return st
    return default_state_dir()


def cmd_down(args) -> int:
    state = _running_state_dir(args)
    rec = _read_pids(state)
    if not rec:
        raise CliExit([f"muster: error: no cluster is running from {state}"], 1)
    procs = list(dict.fromkeys(p for p in [rec.get("restd"), rec.get("controller"),
                                           *rec.get("agents", {}).values()] if p))
    for pid in procs:
        _signal(pid, signal.SIGTERM)
    # jobs run under per-job supervisors that outlive their agent on purpose: stop them too
    spool_root = os.path.join(state, "spool")
    for root, dirs, files in os.walk(spool_root):
        dirs[:] = [d for d in dirs if d != ".trash"]
        if "job.pid" in files and "status.json" not in files:
            for f, sig in (("job.pid", "pg"), ("super.pid", "pid")):
                try:
                    with open(os.path.join(root, f)) as fh:
                        pids = [int(x) for x in fh.read().split()]
                except (OSError, ValueError):
                    continue
                for pid in pids:  # a step daemon lists one pid (session) per task
                    try:
                        if sig == "pg":
                            os.killpg(pid, signal.SIGKILL)
                        else:
                            os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
    deadline = time.time() + 10
    while any(_alive(p) for p in procs) and time.time() < deadline:
        time.sleep(0.05)
    for pid in procs:
        if _alive(pid):
            _signal(pid, signal.SIGKILL)
    _remove_job_trees(spool_root)
    os.unlink(os.path.join(state, PIDS))
    try:
        os.unlink(os.path.join(state, RESTD_INFO))
    except FileNotFoundError:
        pass
    print("Muster cluster stopped")
    return 0


def _remove_job_trees(spool_root: str) -> None:
    """What the jobs left in their cgroups (daemons that left the process group) dies with
    the cluster, and the nodes' cgroup trees go (muster.agent.confine)."""
    try:
        nodes = [e.path for e in os.scandir(spool_root) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    from muster.agent.confine import remove_node_tree
    for spool in nodes:
        remove_node_tree(spool)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def cmd_status(args) -> int:
    state = _running_state_dir(args)
    rec = _read_pids(state) or {}
    conf = rec.get("config")
    info = _ping(conf) if conf else None
    nodes = []
    if info is not None and conf:
        from muster.cli import client
        os.environ["MUSTER_CONF"] = conf
        nodes = client.call({"op": "nodes"})["nodes"]
    daemons = []
    if rec.get("controller"):
        daemons.append({"name": "musterctld", "pid": rec["controller"],
                        "running": _alive(rec["controller"])})
    api = None
    if rec.get("restd"):
        # reported under "api" (not "daemons", whose list is the controller and the agents)
        try:
            with open(os.path.join(state, RESTD_INFO)) as fh:
                api = json.load(fh)
            api["running"] = _alive(rec["restd"])
        except (OSError, ValueError):
            api = None
    for n, pid in (rec.get("agents") or {}).items():
        daemons.append({"name": f"musterd {n}", "node": n, "pid": pid, "running": _alive(pid)})
    out: dict = {"state_dir": state, "config": conf, "controller_responding": info is not None,
                 "cluster": info and info.get("cluster"), "daemons": daemons, "api": api,
                 "nodes": [{"name": n["name"], "addr": n["addr"], "state": n["state"],
                            "flags": n["flags"], "cpus": n["cpus"], "gpus": n["gpus_total"]}
                           for n in nodes]}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0 if rec else 1
    if not rec:
        print(f"No Muster cluster is running from {state}")
        return 1
    print(f"Config:     {conf}")
    print(f"State dir:  {state}")
    print(f"Controller: {'responding' if info else 'NOT responding'}")
    if api:
        print(f"REST API:   {api['url']}  (musterrestd pid {api['pid']}, "
              f"{'running' if api['running'] else 'NOT running'})")
        print(f"Dashboard:  {api['dashboard']}")
        print(f"Metrics:    {api['metrics']}")
    for d in daemons:
        print(f"  {d['name']:<16} pid {d['pid']:<8} {'running' if d['running'] else 'stopped'}")
    for n in out["nodes"]:
        st = "+".join([n["state"]] + n["flags"])
        print(f"  {n['name']:<10} {n['addr']:<12} {st:<24} cpus={n['cpus']} gpus={n['gpus']}")
    return 0


def _main() -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="muster", description="Manage a local Muster cluster")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start a local cluster and wait until it accepts jobs")
    up.add_argument("--nodes", type=int, default=4)
    up.add_argument("--gpus-per-node", type=int, default=None,
                    help="emulated GPUs per node (default: real GPUs via NVML, else 8)")
    up.add_argument("--cpus-per-node", type=int, default=16)
    up.add_argument("--mem-per-node", type=int, default=64000, help="MB")
    up.add_argument("--partitions", default="gpu,debug:1:00:00",
                    help="comma list name[:MaxTime]; the first is the default")
    up.add_argument("--state-dir")
    up.add_argument("--config", help="use this existing slurm.conf")
    up.add_argument("--timeout", type=float, default=60)
    up.add_argument("--emulate", action="store_true",
                    help="serve every node from one musterd process (large emulated clusters)")
    up.add_argument("--no-confine", action="store_true",
                    help="do not confine jobs with cgroups (proctrack/pgid, task/none); "
                         "for comparisons and nodes that cannot")
    up.add_argument("--no-link", action="store_true",
                    help="do not link the config from ~/.config/muster and /etc/muster "
                         "(several clusters side by side; use MUSTER_CONF)")
    down = sub.add_parser("down", help="stop the cluster and everything it started")
    down.add_argument("--state-dir")
    st = sub.add_parser("status", help="show daemons, nodes and config")
    st.add_argument("--state-dir")
    st.add_argument("--json", action="store_true")
    sub.add_parser("sim", add_help=False, help="replay a job trace in virtual time (muster sim -h)")
    if sys.argv[1:2] == ["sim"]:  # own parser; imported only when chosen (keeps muster light)
        from muster.cli import muster_sim
        return muster_sim.main(sys.argv[2:])
    args = ap.parse_args()
    if args.cmd == "up":
        if args.nodes < 1 or args.nodes > 10000:
            raise CliExit(["muster: error: --nodes must be between 1 and 10000"], 1)
        if args.cpus_per_node < 1 or args.mem_per_node < 1 or (args.gpus_per_node or 0) < 0:
            raise CliExit(["muster: error: node sizes must be positive"], 1)
        return cmd_up(args)
    if args.cmd == "down":
        return cmd_down(args)
    return cmd_status(args)


def main() -> None:
    run_main("muster", _main)


if __name__ == "__main__":
    main()
