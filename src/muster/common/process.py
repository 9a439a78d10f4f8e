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
