"""``scontrol ping`` and ``scontrol takeover [INDEX]`` (standard library only).

With one SlurmctldHost, ping asks the controller on the shared socket. With several (an
active/standby set, muster.controller.leader) it asks each controller on its own socket,
``<StateSaveLocation>/musterctld.<index>.sock``: a leader and a standby both answer a ping
(UP); one that does not answer is DOWN. Layout and exit status as Slurm's: one line per
controller, "primary", then "backup" (or "backupN" with more than two); 0 when any is UP;
root gets the restore banner when any is DOWN.
"""

from __future__ import annotations

import _socket
import os
import sys

from muster.common import wire


def controllers() -> tuple[list[str], str]:
    """(SlurmctldHost names in order, StateSaveLocation) from slurm.conf."""
    from muster.cli.client import config_path
    hosts: list[str] = []
    state = "/var/spool"
    path = config_path()
    try:
        with open(path or "") as fh:
            for line in fh:
                for tok in line.split("#", 1)[0].split():
                    k, _, v = tok.partition("=")
                    kl = k.lower()
                    if kl in ("slurmctldhost", "controlmachine") and v:
                        hosts.append(v.strip('"').split("(")[0])
                    elif kl == "statesavelocation" and v:
                        state = v.strip('"')
    except OSError:
        pass
    return hosts or ["localhost"], state


def ask(path: str, msg: dict, timeout: float = 5.0) -> dict | None:
    """One request to the controller socket at ``path``; None when nothing answers."""
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(wire.encode(msg))
        return wire.recv_frame(s)
    except (OSError, wire.FrameError):
        return None
    finally:
        s.close()


def _mode(i: int, n: int) -> str:
    if i == 0:
        return "primary"
    return "backup" if n == 2 else f"backup{i}"


def ping() -> int:
    hosts, state = controllers()
    up: list[bool] = []
    if len(hosts) == 1:
        from muster.cli.client import call
        try:
            call({"op": "ping"})
            up.append(True)
        except Exception:
            up.append(False)
    else:
        for i in range(len(hosts)):
            reply = ask(os.path.join(state, f"musterctld.{i}.sock"), {"op": "ping"})
            up.append(bool(reply and reply.get("ok")))
    for i, host in enumerate(hosts):
        print(f"Slurmctld({_mode(i, len(hosts))}) at {host} is {'UP' if up[i] else 'DOWN'}")
    if not all(up) and os.getuid() == 0:
        print("*****************************************")
        print("** RESTORE SLURMCTLD DAEMON TO SERVICE **")
        print("*****************************************")
    return 0 if any(up) else 1


def takeover(args: list[str]) -> int:
    """Ask controller INDEX (default 1, the backup; Muster also takes 0, to hand control
    back to the primary) to take over now: it asks the leader to hand over, which steps
    down at its next lease renewal (within a second)."""
    hosts, state = controllers()
    if len(args) > 1 or (args and not args[0].isdigit()):
        sys.stderr.write(f"scontrol: error: Invalid takeover index: {' '.join(args)}\n")
        return 1
    index = int(args[0]) if args else 1
    if not 0 <= index < len(hosts) or len(hosts) == 1:
        sys.stderr.write("slurm_takeover error: Invalid controller index "
                         f"(SlurmctldHost lists {len(hosts)})\n")
        return 1
    reply = ask(os.path.join(state, f"musterctld.{index}.sock"), {"op": "takeover"})
    if reply is None:
        sys.stderr.write("slurm_takeover error: Unable to contact slurm controller "
                         "(connect failure)\n")
        return 1
    if reply.get("ok") or reply.get("code") == "invalid_request":  # the latter: it leads
        return 0
    sys.stderr.write(f"slurm_takeover error: {reply.get('error') or 'Unexpected error'}\n")
    return 1
