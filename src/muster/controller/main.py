"""musterctld entry point: ``musterctld [-f slurm.conf] [-D] [-L logfile] [--index N]``.

With several SlurmctldHost lines the process is one of an active/standby set
(muster.controller.leader): ``--index`` says which (default: by host name, else 0)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="musterctld", description="Muster controller")
    ap.add_argument("-f", dest="conf", help="slurm.conf path (default: as the CLI finds it)")
    ap.add_argument("-D", dest="foreground", action="store_true", help="run in the foreground")
    ap.add_argument("-L", dest="logfile", help="log file (default: stderr)")
    ap.add_argument("-v", dest="verbose", action="count", default=0)
    ap.add_argument("--index", type=int, default=None,
                    help="which SlurmctldHost this controller is (0: the primary)")
    args = ap.parse_args(argv)
    from muster.common.auth import CredentialError
    from muster.common.errors import MusterError
    from muster.common.process import daemon_start
    from muster.config import load
    from muster.config.locate import find_config_path
    path = daemon_start("musterctld", args.conf or find_config_path(), args.logfile, args.verbose)
    if path is None:
        return 1
    try:
        cfg = load(os.path.abspath(path))
        for w in cfg.warnings:
            logging.warning("config: %s", w)
        from muster.common.securefs import UnsafePath, ensure_private_dir
        try:
            ensure_private_dir(cfg.state_save_location, "StateSaveLocation")
        except UnsafePath as exc:
            print(f"musterctld: error: {exc}", file=sys.stderr)
            return 1
        from muster.common.clock import RealClock
        if len(cfg.slurmctld_hosts) > 1:  # active/standby: the lease decides who leads
            return _run_ha(cfg, args.index, RealClock())
        from muster.controller.server import Controller
        from muster.store import open_store
        store = open_store(cfg.store_url, claim="musterctld")  # refuses a newer schema
        ctl = Controller(cfg, store, RealClock())
    except MusterError as exc:
        print(f"musterctld: error: {exc.message}", file=sys.stderr)
        return 1
    except CredentialError as exc:  # the cluster key: a one-line reason, no traceback
        logging.error("start-up refused: %s", exc)
        print(f"musterctld: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - one clear line, details in the log
        logging.exception("start-up failed")
        print(f"musterctld: error: {exc}", file=sys.stderr)
        return 1
    try:
        import uvloop  # optional
        uvloop.install()
    except ImportError:
        pass
    from muster.common import pidfile
    pid_path = os.path.join(cfg.state_save_location, pidfile.CONTROLLER)
    pidfile.write(pid_path)  # how `muster status/down/restart` find this process
    try:
        asyncio.run(ctl.serve())
    finally:
        pidfile.remove(pid_path)
    return 0


def _run_ha(cfg, requested: int | None, clock) -> int:
    """One controller of an active/standby set; its pid file is named by its index (the
    primary's is the usual one, so `muster status/down` find it as before)."""
    from muster.common import pidfile
    from muster.controller import leader
    index = leader.my_index(cfg, requested)
    name = pidfile.CONTROLLER if index == 0 else f"musterctld.{index}.pid"
    pid_path = os.path.join(cfg.state_save_location, name)
    try:
        import uvloop  # optional
        uvloop.install()
    except ImportError:
        pass
    pidfile.write(pid_path)
    try:
        return leader.run(cfg, index, clock)
    finally:
        pidfile.remove(pid_path)


if __name__ == "__main__":
    sys.exit(main())
