"""Process set-up shared by the daemons (musterctld, musterd)."""

from __future__ import annotations


def raise_fd_limit() -> None:
    """Connections, pidfds and job pipes all need descriptors: use the hard limit (an emulated
    1,000-node agent or a busy controller outgrows the usual soft limit of 1,024)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def daemon_start(prog: str, path: str | None, logfile: str | None, verbose: int) -> str | None:
    """What both daemons do first: check they have a config (``path``: ``-f``, else what
    muster.config.locate found; the caller locates it, common may not import config), raise
    the fd limit, set up logging (a log file reopens on SIGUSR2 and SIGHUP: logrotate).
    Returns the config path, or None after printing why not."""
    import logging
    import sys

    from muster.common import logsetup

    if not path:
        print(f"{prog}: error: no configuration found (use -f or MUSTER_CONF)", file=sys.stderr)
        return None
    raise_fd_limit()
    logsetup.setup(prog, logfile, logging.DEBUG if verbose else logging.INFO)
    logsetup.install_reopen_signals(prog)
    return path
