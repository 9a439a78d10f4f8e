"""muster: set up and manage a local cluster (``up``, ``down``, ``status``, ``restart``,
``start-agents``; ``backup`` and ``restore`` of the state store: muster.cli.muster_backup).

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
from dataclasses import dataclass, field

from muster.cli.client import run_main
from muster.cli.getopt import CliExit

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:  # annotations only
    from muster.config.slurmconf import ClusterConfig

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
    """A free port for a daemon to listen on, below the kernel's ephemeral range
    (ip_local_port_range): a port from that range (what ``bind(0)`` gives) can be taken as the
    local port of any outgoing connection while its daemon is down for a restart, and the
    daemon then cannot listen on its own port again."""
    import random
    low = _ephemeral_low()
    top = min(low, 32768) - 1
    for _ in range(200):
        port = random.randint(max(1024, top - 12000), top)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a crowded host: whatever the kernel gives
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


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


def _topology(spec: str | None, glob: dict, names: list[str]) -> str | None:
    """``--topology tree:N``: a two-level topology.conf (leaf switches ``leaf1..`` of N
    consecutive nodes under switch ``top``) and ``TopologyPlugin=topology/tree``; None
    without the option."""
    if not spec:
        return None
    kind, _, size = spec.partition(":")
    if kind != "tree" or not size.isdigit() or int(size) < 1:
        raise CliExit([f"muster: error: --topology {spec}: expected tree:N (N nodes per leaf "
                       "switch)"], 1)
    from muster.config.topologyconf import render_tree
    k = int(size)
    glob["TopologyPlugin"] = "topology/tree"
    return render_tree([(f"leaf{i // k + 1}", names[i:i + k]) for i in range(0, len(names), k)])


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
    from muster.common import pidfile
    running = pidfile.running(os.path.join(state, pidfile.CONTROLLER), "musterctld") or \
        (pids.get("controller") if pids and _alive(pids.get("controller")) else None)
    if running:
        raise CliExit([f"muster: error: a cluster is already running from {state} "
                       f"(musterctld pid {running}); run `muster down` first (`muster "
                       "start-agents` starts the agents of nodes that have none)"], 1)
    if pids and pids.get("kept_jobs") and pids.get("config") and not args.config:
        # after `muster down --keep-jobs`: the same cluster again, so its jobs are adopted
        args.config = pids["config"]
        sys.stderr.write(f"muster: note: restarting the cluster of {args.config} (stopped with "
                         "--keep-jobs); its running jobs are adopted\n")
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
                "StateSaveLocation": state, "SlurmdSpoolDir": _spool_template(state),
                "AuthInfo": f"key={key}", "KillWait": 30, "MinJobAge": 300,
                "SlurmdTimeout": 12, "ReturnToService": 2, "MaxArraySize": 10001,
                "DefMemPerCPU": max(1, mem // max(1, cpus)), "SelectType": "select/cons_tres",
                "SelectTypeParameters": "CR_Core_Memory"}
        if gpus:
            glob["GresTypes"] = "gpu"
        cgroup_conf = _confinement(glob, not args.no_confine)
        topology_conf = _topology(args.topology, glob, node_names)
        slurm_conf, gres_conf = render("muster", nodes, parts, glob)
        if args.standby:  # a second controller on this machine, on its own loopback address
            slurm_conf += "SlurmctldHost=standby(127.0.0.2)\n"
        with open(conf, "w") as fh:
            fh.write(slurm_conf)
        with open(os.path.join(state, "gres.conf"), "w") as fh:
            fh.write(gres_conf)
        with open(os.path.join(state, "cgroup.conf"), "w") as fh:
            fh.write(cgroup_conf)
        topo_path = os.path.join(state, "topology.conf")
        if topology_conf:
            with open(topo_path, "w") as fh:
                fh.write(topology_conf)
        elif os.path.lexists(topo_path):
            os.unlink(topo_path)  # a previous `up --topology` of this state directory
        cfg = load(conf)
    _relink_runtime_spool(state, cfg)
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
    _start_standbys(cfg, conf, logdir, record, state)
    if args.emulate:
        from muster.common.hostlist import compress
        names = compress(list(cfg.nodes))
        pid = _spawn([_bin("musterd"), "-f", conf, "-N", names, "-L",
                      os.path.join(logdir, "musterd.log")], os.path.join(logdir, "musterd.out"))
        record["agents"] = {name: pid for name in cfg.nodes}
        record["emulate"] = True  # `muster start-agents` keeps to one process for new nodes
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


def _start_standbys(cfg, conf: str, logdir: str, record: dict, state: str) -> None:
    """Controllers 1.. of a configuration with several SlurmctldHosts (``--standby``): each
    waits for the lease (muster.controller.leader); recorded for `muster down`."""
    for i in range(1, len(cfg.slurmctld_hosts)):
        record.setdefault("standby", {})[str(i)] = _spawn(
            [_bin("musterctld"), "-f", conf, "--index", str(i),
             "-L", os.path.join(logdir, f"musterctld.{i}.log")],
            os.path.join(logdir, f"musterctld.{i}.out"))
    _write_pids(state, record)


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


SPOOL_LINK = "spool"  # in the state directory: the nodes' spool directories, or a link to them
RUNTIME_BASES = ("XDG_RUNTIME_DIR", "/dev/shm")  # where a local cluster's spools may live


def _fstype(path: str) -> str | None:
    """The file system type of the mount that holds ``path`` (/proc/self/mountinfo)."""
    from muster.common import mountinfo
    real, best, kind = os.path.realpath(path), "", None
    for mnt, fstype, _opts, _sup in mountinfo.entries():
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, kind = mnt, fstype
    return kind


def _runtime_base() -> str | None:
    """A tmpfs directory for the spools where no other user can remove or rename what we
    make in it: $XDG_RUNTIME_DIR when it is ours and private, else /dev/shm when it is root's
    and sticky (others may not touch entries they do not own); None when neither is."""
    import stat
    for cand in RUNTIME_BASES:
        base = os.environ.get(cand) if not cand.startswith("/") else cand
        if not base or not os.path.isabs(base):
            continue
        try:
            st = os.lstat(base)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            continue
        ours = st.st_uid == os.geteuid() and not st.st_mode & 0o022
        sticky = st.st_uid == 0 and st.st_mode & stat.S_ISVTX
        if (ours or sticky) and _fstype(base) == "tmpfs":
            return base
    return None


def _spool_template(state: str) -> str:
    """SlurmdSpoolDir for a generated local cluster: the nodes' spools in memory (a tmpfs),
    linked from ``STATE/spool``, else ``STATE/spool/%n`` on disk.

    Why memory: an agent makes and later deletes ~6 files per job in its spool (the script,
    the launch description, pid files, the status). On ext4 without a journal, every new inode
    skips, one by one, each inode of its block group freed in the last 1–6 minutes, so a burst
    of jobs pays for the previous burst's deletions (measured: a quarter of a 1,000-task
    array's CPU time, docs/design.md "Spools in memory"). A tmpfs has no such cost, and a
    local cluster's spools live no longer than the machine's processes anyway: the jobs they
    describe end with the machine. A state directory whose ``spool`` is already a directory
    (made before, or where no tmpfs exists) keeps it, so kept jobs are adopted.

    The directory is ``BASE/muster-<random>`` (0711, ours; an unpredictable name, so no other
    user can make it first), checked by the agents like any spool (muster.common.securefs)."""
    import secrets
    link = os.path.join(state, SPOOL_LINK)
    on_disk = os.path.join(link, "%n")
    if os.path.islink(link):
        from muster.common.securefs import UnsafePath, check_private_dir
        target = os.readlink(link)
        try:
            check_private_dir(target, "spool")
            return os.path.join(target, "%n")
        except UnsafePath:  # gone (a reboot emptied the tmpfs), or no longer only ours
            os.unlink(link)
    elif os.path.lexists(link):
        return on_disk
    base = _runtime_base()
    if base is None:
        return on_disk
    while True:
        target = os.path.join(base, f"muster-{secrets.token_hex(8)}")
        try:
            _make_spool_root(target)
            break
        except FileExistsError:
            continue
        except OSError:
            return on_disk
    os.symlink(target, link)
    return os.path.join(target, "%n")


def _make_spool_root(path: str) -> None:
    """mkdir ``path`` 0711 whatever the umask (FileExistsError when it exists)."""
    os.mkdir(path, 0o711)
    os.chmod(path, 0o711)


def _relink_runtime_spool(state: str, cfg) -> None:
    """``muster up --config`` of a configuration whose spools an earlier ``muster up`` put in
    memory, after ``muster down`` removed them: that directory is made again and linked. One
    that someone else made meanwhile is linked too, and the agents refuse it with the reason."""
    tpl = cfg.slurmd_spool_dir or ""
    root = os.path.dirname(tpl) if tpl.endswith("/%n") else ""
    link = os.path.join(state, SPOOL_LINK)
    if not root or os.path.lexists(link) or not os.path.basename(root).startswith("muster-") \
            or os.path.dirname(root) != _runtime_base():
        return
    try:
        _make_spool_root(root)
    except FileExistsError:
        pass
    except OSError:
        return
    os.symlink(root, link)


def _remove_runtime_spool(state: str) -> None:
    """``muster down``: the in-memory spools go with the cluster (their link too)."""
    link = os.path.join(state, SPOOL_LINK)
    if not os.path.islink(link):
        return
    import shutil
    target = os.readlink(link)
    if os.path.basename(target).startswith("muster-") and os.path.isdir(target) and \
            not os.path.islink(target) and os.lstat(target).st_uid in (0, os.geteuid()):
        shutil.rmtree(target, ignore_errors=True)
    os.unlink(link)


@dataclass
class Layout:
    """What the configuration says of the cluster in a state directory.

    ``nodes``: the configured nodes, in order; ``spools``: node -> spool directory for them;
    ``retired``: the same for nodes muster.pids recorded an agent for that the configuration
    no longer has (removed by ``scontrol reconfigure``; the agent runs on until its last job
    ends, then stops); ``cfg``: the loaded configuration, None when it cannot be read (then
    only the controller and the REST daemon are found)."""
    conf: str | None
    nodes: list[str] = field(default_factory=list)
    spools: dict[str, str] = field(default_factory=dict)
    retired: dict[str, str] = field(default_factory=dict)
    cfg: ClusterConfig | None = None


def _layout(state: str, rec: dict | None) -> Layout:
    """The layout of the cluster in ``state``: from the config muster.pids names, else the
    one in the state directory."""
    conf = (rec or {}).get("config") or os.path.join(state, "slurm.conf")
    try:
        from muster.config import load
        cfg = load(conf)
    except Exception:  # noqa: BLE001 - a broken config must not stop `muster down`
        return Layout(conf if os.path.exists(conf) else None)
    template = cfg.slurmd_spool_dir or os.path.join(cfg.state_save_location, "spool", "%n")
    gone = [n for n in (rec or {}).get("agents") or {} if n not in cfg.nodes]
    return Layout(conf, list(cfg.nodes), {n: cfg.node_path(template, n) for n in cfg.nodes},
                  {n: cfg.node_path(template, n) for n in gone}, cfg)


def cmd_down(args) -> int:
    """Stop the daemons found through their pid files (muster.cli.muster_daemons); unless
    ``--keep-jobs``, also the jobs and steps they ran. With ``--keep-jobs`` the jobs go on
    under their supervisors and step daemons, and the next ``muster up`` adopts them."""
    from muster.cli import muster_daemons
    state = _running_state_dir(args)
    rec = _read_pids(state)
    lay = _layout(state, rec)
    conf = lay.conf
    daemons = muster_daemons.find(state, lay.spools, rec, lay.retired)
    if not rec and not daemons:
        raise CliExit([f"muster: error: no cluster is running from {state}"], 1)
    muster_daemons.stop(daemons)
    spool_root = os.path.join(state, "spool")
    if not args.keep_jobs:
        _kill_jobs(spool_root)
        _remove_job_trees(spool_root)
        _remove_runtime_spool(state)
    if args.keep_jobs:
        _write_pids(state, {"config": conf or (rec or {}).get("config"), "state_dir": state,
                            "agents": {}, "kept_jobs": True})
    else:
        try:
            os.unlink(os.path.join(state, PIDS))
        except FileNotFoundError:
            pass
    try:
        os.unlink(os.path.join(state, RESTD_INFO))
    except FileNotFoundError:
        pass
    print("Muster cluster stopped" + (" (jobs left running; `muster up` adopts them)"
                                      if args.keep_jobs else ""))
    return 0


def _kill_jobs(spool_root: str) -> None:
    """Jobs run under per-job supervisors that outlive their agent on purpose: stop them."""
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


def _status_daemons(state: str, rec: dict) -> tuple[list[dict], int | None]:
    """The controller and one entry per node, with the pid of the process that runs it now
    (found by its pid file, muster.cli.muster_daemons), else the one muster.pids recorded,
    shown stopped; and the REST daemon's pid (None when it does not run). A node removed
    from the configuration is shown only while its agent still runs (its last jobs): once
    that agent has stopped, there is nothing wrong to report."""
    from muster.cli import muster_daemons
    lay = _layout(state, rec)
    nodes = lay.nodes
    found = muster_daemons.find(state, lay.spools, rec, lay.retired)
    ctld = next((d.pid for d in found if d.kind == "musterctld"), None)
    restd = next((d.pid for d in found if d.kind == "musterrestd"), None)
    agent_of = {n: d.pid for d in found if d.kind == "musterd" for n in d.nodes}
    out = []
    if ctld or rec.get("controller"):
        out.append({"name": "musterctld", "pid": ctld or rec.get("controller"),
                    "running": ctld is not None})
    recorded = rec.get("agents") or {}
    for n in nodes or list(recorded):
        pid = agent_of.get(n) or recorded.get(n)
        if pid:
            out.append({"name": f"musterd {n}", "node": n, "pid": pid, "running": n in agent_of})
    for n in lay.retired:
        if n in agent_of:
            out.append({"name": f"musterd {n}", "node": n, "pid": agent_of[n], "running": True,
                        "removed": True})
    return out, restd


def cmd_status(args) -> int:
    state = _running_state_dir(args)
    rec = _read_pids(state) or {}
    daemons, restd = _status_daemons(state, rec)
    if rec.get("kept_jobs") and not any(d["running"] for d in daemons):
        rec = {}  # stopped by `muster down --keep-jobs`: not running
    conf = rec.get("config") or (os.path.join(state, "slurm.conf") if daemons else None)
    info = _ping(conf) if conf else None
    nodes = []
    if info is not None and conf:
        from muster.cli import client
        os.environ["MUSTER_CONF"] = conf
        nodes = client.call({"op": "nodes"})["nodes"]
    running = bool(rec) or any(d["running"] for d in daemons)
    api = None
    if restd or rec.get("restd"):
        # reported under "api" (not "daemons", whose list is the controller and the agents)
        try:
            with open(os.path.join(state, RESTD_INFO)) as fh:
                api = json.load(fh)
            api["running"] = restd is not None
            api["pid"] = restd or api.get("pid")
        except (OSError, ValueError):
            api = None
    out: dict = {"state_dir": state, "config": conf, "controller_responding": info is not None,
                 "cluster": info and info.get("cluster"), "daemons": daemons, "api": api,
                 "nodes": [{"name": n["name"], "addr": n["addr"], "state": n["state"],
                            "flags": n["flags"], "cpus": n["cpus"], "gpus": n["gpus_total"]}
                           for n in nodes]}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0 if running else 1
    if not running:
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
        print(f"  {d['name']:<16} pid {d['pid']:<8} {'running' if d['running'] else 'stopped'}"
              + ("  (node removed from the configuration)" if d.get("removed") else ""))
    for n in out["nodes"]:
        st = "+".join([n["state"]] + n["flags"])
        print(f"  {n['name']:<10} {n['addr']:<12} {st:<24} cpus={n['cpus']} gpus={n['gpus']}")
    return 0


def _running_cluster(args):
    """(state dir, muster.pids record, layout, running daemons, controller) of the cluster
    ``restart``/``start-agents`` act on; a clear error when no controller runs. The record
    forgets agents of removed nodes that have stopped."""
    from muster.cli import muster_daemons
    state = _running_state_dir(args)
    rec = _read_pids(state) or {}
    lay = _layout(state, rec)
    found = muster_daemons.find(state, lay.spools, rec, lay.retired)
    ctld = next((d for d in found if d.kind == "musterctld"), None)
    if ctld is None or lay.conf is None:
        raise CliExit([f"muster: error: no controller is running from {state}"], 1)
    os.environ["MUSTER_CONF"] = lay.conf
    served = {n for d in found if d.kind == "musterd" for n in d.nodes}
    rec["agents"] = {n: p for n, p in (rec.get("agents") or {}).items()
                     if n not in lay.retired or n in served}
    rec.update({"config": lay.conf, "state_dir": state, "controller": ctld.pid})
    _write_pids(state, rec)
    os.makedirs(os.path.join(state, "log"), exist_ok=True)
    return state, rec, lay, found, ctld


def _missing_agents(lay: Layout, found: list, restarting: bool) -> tuple[list[str], list[str]]:
    """(nodes to start an agent for, nodes the controller does not know yet): this host's
    configured nodes that have no agent running. Nodes of other hosts, and nodes the
    controller does not know (slurm.conf edited but not reconfigured: it would refuse their
    agent), are named on stderr and left out."""
    from muster.cli import client, muster_daemons
    served = {n for d in found if d.kind == "musterd" for n in d.nodes}
    missing = [n for n in lay.nodes if n not in served]
    if not missing or lay.cfg is None:
        return [], []
    known = {n["name"] for n in client.call({"op": "nodes"})["nodes"]}
    todo, unknown = [], []
    for n in missing:
        node = lay.cfg.nodes[n]
        if not muster_daemons.is_local(node.addr, node.hostname):
            sys.stderr.write(f"muster: note: {n} ({node.addr}) is not a node of this host; "
                             "start its musterd there\n")
        elif n not in known:
            unknown.append(n)
            sys.stderr.write(f"muster: note: the controller does not know {n} yet; run "
                             "`scontrol reconfigure` first\n")
        else:
            todo.append(n)
            if restarting:
                sys.stderr.write(f"muster: note: no musterd ran for {n}; starting one\n")
    return todo, unknown


def _start_missing(state: str, rec: dict, lay: Layout, found: list, timeout: float,
                   restarting: bool = False) -> tuple[list, list[str]]:
    """Start the agents ``_missing_agents`` names, leaving running ones alone: one process
    per node, or one for all of them when the cluster is emulated (``--emulate``). Returns
    the started daemons once every one of their nodes has registered, and the nodes left
    out because the controller does not know them."""
    from muster.cli import client, muster_daemons
    from muster.common.hostlist import compress
    todo, unknown = _missing_agents(lay, found, restarting)
    if not todo:
        return [], unknown
    logdir = os.path.join(state, "log")
    emulated = rec.get("emulate") or any(len(d.nodes) > 1 for d in found if d.kind == "musterd")
    groups = [todo] if emulated else [[n] for n in todo]
    plans = [(g, [_bin("musterd"), "-f", lay.conf or "", "-N", compress(g), "-L",
                  os.path.join(logdir, f"musterd-{g[0]}.log")]) for g in groups]
    started = muster_daemons.start_agents(plans, client.call, logdir, timeout)
    for d in started:
        rec["agents"].update(dict.fromkeys(d.nodes, d.pid))
        print(f"musterd {','.join(d.nodes)} started (pid {d.pid})", flush=True)
    _write_pids(state, rec)
    return started, unknown


def cmd_start_agents(args) -> int:
    """``muster start-agents``: start what is missing, touch nothing that runs. Exit 1 when
    a node of this host was left out because the controller does not know it yet."""
    state, rec, lay, found, _ctld = _running_cluster(args)
    try:
        started, unknown = _start_missing(state, rec, lay, found, args.timeout)
    except (TimeoutError, RuntimeError) as exc:
        raise CliExit([f"muster: error: {exc}"], 1) from None
    if not started and not unknown:
        print("No musterd to start: every node of this host has one running")
    return 1 if unknown else 0


def cmd_restart(args) -> int:
    """Rolling restart (muster.cli.muster_daemons): the agents one process at a time, each
    waited for until its nodes registered again, and the missing agents of this host's nodes
    started; then the controller; then musterrestd, a client of the controller, waited for
    until it answers HTTP. Jobs keep running."""
    from muster.cli import client, muster_daemons
    state, rec, lay, found, ctld = _running_cluster(args)
    logdir = os.path.join(state, "log")
    try:
        if args.which in ("all", "agents"):
            for d in (d for d in found if d.kind == "musterd"):
                pid = muster_daemons.restart_agent(d, client.call, logdir, args.timeout)
                rec["agents"].update(dict.fromkeys(d.nodes, pid))
                _write_pids(state, rec)
                print(f"musterd {','.join(d.nodes)} restarted (pid {pid})", flush=True)
            found += _start_missing(state, rec, lay, found, args.timeout, restarting=True)[0]
        if args.which in ("all", "controller"):
            served = [n for d in found if d.kind == "musterd" for n in d.nodes
                      if n in lay.spools]
            rec["controller"] = muster_daemons.restart_controller(ctld, client.call, logdir,
                                                                  served, args.timeout)
            _write_pids(state, rec)
            print(f"musterctld restarted (pid {rec['controller']})", flush=True)
        if args.which in ("all", "api"):
            _restart_restd(state, rec, found, args)
    except (TimeoutError, RuntimeError) as exc:
        raise CliExit([f"muster: error: {exc}"], 1) from None
    return 0


def _restart_restd(state: str, rec: dict, found: list, args) -> None:
    """Restart musterrestd when it runs (the ``api`` extra); ``--api`` insists on one."""
    from muster.cli import muster_daemons
    restd = next((d for d in found if d.kind == "musterrestd"), None)
    if restd is None:
        if args.which == "api":
            raise CliExit([f"muster: error: no musterrestd is running from {state}"], 1)
        if rec.get("restd"):
            sys.stderr.write("muster: note: musterrestd is not running; not restarted\n")
        return
    rec["restd"] = muster_daemons.restart_restd(restd, state, os.path.join(state, "log"),
                                                args.timeout)
    _write_pids(state, rec)
    info_path = os.path.join(state, RESTD_INFO)
    try:
        with open(info_path) as fh:
            info = json.load(fh)
        info["pid"] = rec["restd"]
        with open(info_path + ".tmp", "w") as fh:
            json.dump(info, fh)
        os.replace(info_path + ".tmp", info_path)
    except (OSError, ValueError):
        pass  # started by hand, without `muster up`'s URL file: nothing to update
    print(f"musterrestd restarted (pid {rec['restd']})", flush=True)


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
    up.add_argument("--standby", action="store_true",
                    help="also start a standby controller (SlurmctldHost standby, 127.0.0.2) "
                         "that takes over when the first one stops (issue 16)")
    up.add_argument("--topology", metavar="tree:N",
                    help="a two-level switch tree with N nodes per leaf switch "
                         "(writes topology.conf, TopologyPlugin=topology/tree)")
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
    down.add_argument("--keep-jobs", action="store_true",
                      help="stop the daemons only: running jobs and steps go on, and the next "
                           "`muster up` adopts them")
    rs = sub.add_parser("restart", help="restart the daemons one by one; jobs keep running")
    rs.add_argument("--state-dir")
    which = rs.add_mutually_exclusive_group()
    which.add_argument("--controller", dest="which", action="store_const", const="controller",
                       help="only the controller")
    which.add_argument("--agents", dest="which", action="store_const", const="agents",
                       help="only the agents, one process at a time; this host's nodes "
                            "with none running get one")
    which.add_argument("--api", dest="which", action="store_const", const="api",
                       help="only musterrestd (REST API and dashboard)")
    which.add_argument("--all", dest="which", action="store_const", const="all",
                       help="agents one by one (and the missing ones started), then the "
                            "controller, then musterrestd (the default)")
    rs.set_defaults(which="all")
    rs.add_argument("--timeout", type=float, default=120,
                    help="seconds to wait for each daemon to come back (default %(default)s)")
    sa = sub.add_parser("start-agents",
                        help="start the agents of this host's nodes that have none running "
                             "(e.g. nodes added by `scontrol reconfigure`); running ones are "
                             "left alone")
    sa.add_argument("--state-dir")
    sa.add_argument("--timeout", type=float, default=120,
                    help="seconds to wait for the nodes to register (default %(default)s)")
    st = sub.add_parser("status", help="show daemons, nodes and config")
    st.add_argument("--state-dir")
    st.add_argument("--json", action="store_true")
    sub.add_parser("sim", add_help=False, help="replay a job trace in virtual time (muster sim -h)")
    from muster.cli import muster_backup  # stdlib-only until a command runs
    muster_backup.add_parsers(sub)
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
    if args.cmd == "restart":
        return cmd_restart(args)
    if args.cmd == "start-agents":
        return cmd_start_agents(args)
    if args.cmd == "backup":
        return muster_backup.cmd_backup(args)
    if args.cmd == "restore":
        return muster_backup.cmd_restore(args)
    return cmd_status(args)


def main() -> None:
    run_main("muster", _main)


if __name__ == "__main__":
    main()
