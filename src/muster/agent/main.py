"""musterd entry point: ``musterd [-f slurm.conf] -N nodename [-L logfile]``."""

from __future__ import annotations

import argparse
import os
import socket
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="musterd", description="Muster node agent")
    ap.add_argument("-f", dest="conf")
    ap.add_argument("-N", dest="node", help="node name, or a hostlist of nodes to emulate in "
                    "this one process (default: short hostname)")
    ap.add_argument("-D", dest="foreground", action="store_true")
    ap.add_argument("-L", dest="logfile")
    ap.add_argument("-v", dest="verbose", action="count", default=0)
    ap.add_argument("--relay-only", action="store_true",
                    help="serve no node: only relay this host's commands to the controller "
                         "(a login host; -N names it, default: short hostname)")
    args = ap.parse_args(argv)
    from muster.common.errors import MusterError
    from muster.common.process import daemon_start
    from muster.config import load
    from muster.config.locate import find_config_path
    path = daemon_start("musterd", args.conf or find_config_path(), args.logfile, args.verbose)
    if path is None:
        return 1
    try:
        cfg = load(os.path.abspath(path))
    except MusterError as exc:
        print(f"musterd: error: {exc.message}", file=sys.stderr)
        return 1
    from muster.common.hostlist import expand
    try:
        names = expand(args.node) if args.node else [socket.gethostname().split(".")[0]]
    except MusterError as exc:
        print(f"musterd: error: {exc.message}", file=sys.stderr)
        return 1
    if args.relay_only:
        return _relay_only(cfg, names)
    unknown = [n for n in names if n not in cfg.nodes]
    if unknown:
        print(f"musterd: error: node {unknown[0]} is not in {path}", file=sys.stderr)
        return 1
    # fork the zygote now, while this process is still small (see muster.agent.zygote)
    from muster.agent import zygote
    chan, _zpid = zygote.start()
    from muster.agent import daemon
    from muster.agent.daemon import Agent, run_many
    daemon.ZYGOTE = chan
    try:
        agents = [Agent(cfg, n) for n in names]
    except Exception as exc:  # noqa: BLE001
        print(f"musterd: error: {exc}", file=sys.stderr)
        return 1
    import asyncio
    import gc
    gc.collect()
    gc.freeze()  # everything loaded so far is permanent: forked supervisors never touch it via gc
    from muster.common import pidfile
    pid_paths = [os.path.join(a.spool, pidfile.AGENT) for a in agents]
    for p in pid_paths:  # one per node served: how `muster status/down/restart` find us
        pidfile.write(p)
    try:
        asyncio.run(agents[0].run() if len(agents) == 1 else run_many(agents))
    finally:
        for p in pid_paths:
            pidfile.remove(p)
    return 0


def _relay_only(cfg, names: list[str]) -> int:
    """A login host's musterd: the relay socket of each name (muster.agent.relay), nothing
    else — no node registers, no job runs here."""
    import asyncio
    import signal

    from muster.agent.relay import Relay, socket_path
    from muster.common import auth, securefs
    from muster.common.errors import MusterError
    try:
        keys = auth.load_keys(cfg.key_path)
        spools = [cfg.node_path(cfg.slurmd_spool_dir, n) for n in names]
        for spool in spools:
            securefs.ensure_private_dir(os.path.dirname(spool), "SlurmdSpoolDir's parent")
            securefs.ensure_private_dir(spool, "SlurmdSpoolDir", mode=0o711)
    except (MusterError, OSError) as exc:
        print(f"musterd: error: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1

    async def serve() -> None:
        relays = [Relay(cfg, keys, n, socket_path(sp)) for n, sp in zip(names, spools)]
        for r in relays:
            await r.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        for r in relays:
            r.close()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
