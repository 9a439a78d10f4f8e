"""musterrestd: ``musterrestd [-f slurm.conf] [--listen HOST:PORT] [-L logfile]``.

A separate process (not part of musterctld) so that HTTP parsing never runs on the
controller's loop, it can be restarted on its own, and the controller keeps its small
dependency set. It runs as root (or the cluster owner) to read the cluster key, with which it
authenticates its links to the controller as each request's user.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="musterrestd", description="Muster REST API, metrics "
                                 "and dashboard")
    ap.add_argument("-f", dest="conf", help="slurm.conf path (default: as the CLI finds it)")
    ap.add_argument("--listen", default="127.0.0.1:6820", help="HOST:PORT (default %(default)s)")
    ap.add_argument("-L", dest="logfile", help="log file (default: stderr)")
    args = ap.parse_args(argv)
    from muster.common import logsetup
    logsetup.setup("musterrestd", args.logfile, logging.INFO)
    logsetup.install_reopen_signals("musterrestd")  # SIGUSR2/SIGHUP: logrotate
    from muster.common import auth
    from muster.common.errors import MusterError
    from muster.config import load
    from muster.config.locate import find_config_path
    path = args.conf or find_config_path()
    if not path:
        print("musterrestd: error: no configuration found (use -f or MUSTER_CONF)", file=sys.stderr)
        return 1
    host, _, port = args.listen.rpartition(":")
    # least exposure: ":PORT" means loopback; every interface must be asked for ("0.0.0.0:PORT")
    host = host or "127.0.0.1"
    try:
        port = int(port)
    except ValueError:
        print(f"musterrestd: error: invalid --listen {args.listen!r}", file=sys.stderr)
        return 1
    try:
        cfg = load(os.path.abspath(path))
        keys = auth.load_keys(cfg.key_path)  # the key, then muster.key.old (rotation)
    except (MusterError, auth.CredentialError) as exc:
        print(f"musterrestd: error: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    import uvicorn

    from muster.api.app import Api, build_app
    from muster.api.ctlclient import ControllerClient
    from muster.api.jwtauth import JwtVerifier
    client = ControllerClient(cfg.slurmctld_addr or "127.0.0.1", cfg.slurmctld_port, keys,
                              hosts=cfg.slurmctld_addrs)
    verifier = JwtVerifier(os.path.join(cfg.state_save_location, "jwt.key"))
    app = build_app(Api(client, verifier, cfg.cluster_name))
    logging.info("musterrestd listening on http://%s:%d (controller %s:%d)", host,
                 port, client.host, client.port)
    from muster.common import pidfile
    pid_path = os.path.join(cfg.state_save_location, pidfile.RESTD)
    pidfile.write(pid_path)  # how `muster status/down/restart` find this process
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning",
                    access_log=False, log_config=None)
    finally:
        pidfile.remove(pid_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
