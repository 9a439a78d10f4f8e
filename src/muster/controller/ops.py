"""Every client operation of musterctld, registered: importing this module imports each module
that defines operations (each fills muster.controller.opspec.OPS with its ``@op`` handlers).
The server dispatches through ``OPS`` from here, so a module missing from MODULES is a set of
operations the controller does not answer — the list is explicit on purpose.
"""

from __future__ import annotations

from muster.controller import acct_ops, api_ops, diag, handlers, reconfig, topo_ops, usage
from muster.controller.opspec import OPS

MODULES = (handlers, api_ops, acct_ops, usage, reconfig, diag, topo_ops)  # core jobs;
# REST/metrics/dashboard; sacctmgr, sprio, sshare, reservations; sstat; scontrol reconfigure;
# sdiag, setdebug; scontrol show topology

__all__ = ["MODULES", "OPS"]
