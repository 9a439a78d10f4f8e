"""``scontrol ping`` and ``scontrol takeover [INDEX]`` (standard library only).

With one SlurmctldHost, ping asks the controller on the shared socket. With several (an
active/standby set, muster.controller.leader) it asks each controller on its own socket,
``<StateSaveLocation>/musterctld.<index>.sock``: a leader and a standby both answer a ping
(UP); one whose socket is here but does not answer is DOWN. One with no socket here
(another host's, or any from a node or login host) is as the leader knows it: alive when it
marked itself so in the store within the last seconds; DOWN when not, or no leader answers.
Layout and exit status as Slurm's: one line per controller, "primary", then "backup" (or
"backupN" with more than two); 0 when any is UP; root gets the restore banner when any is
DOWN.
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


def _several_up(n: int, state: str) -> list[bool]:
    """UP/DOWN of each controller of an active/standby set: asked on its own socket where
    this host has it; the ones it cannot reach (they run on other hosts, or this is a node or
    login host) as the leader knows them — its own liveness marks in the store — asked the
    way every command reaches the leader (its socket, else this node's relay)."""
    import stat
    up: list[bool | None] = []
    for i in range(n):
        path = os.path.join(state, f"musterctld.{i}.sock")
        reply = ask(path, {"op": "ping"})
        try:  # a socket here that does not answer: that controller runs here, and is down
            here = stat.S_ISSOCK(os.stat(path).st_mode)
        except OSError:
            here = False
        up.append(True if reply and reply.get("ok") else False if here else None)
    if None in up:
        from muster.cli.client import call
        try:
            known = call({"op": "ping", "controllers": True}, retry=0).get("controllers")
        except Exception:  # noqa: BLE001 - no leader to ask: those are DOWN
            known = None
        if isinstance(known, list) and len(known) == n:
            up = [u if u is not None else bool(k) for u, k in zip(up, known)]
    return [bool(u) for u in up]


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
        up = _several_up(len(hosts), state)
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
