"""The jobs that ran container tasks on this node, and the end of their named containers.

A job's named containers (``--container-name``) live in the user's node directory
(muster.agent.oci) for as long as the job may start steps here. Once the job is over on
this node they are removed, and the user's image cache is brought back within its limit,
by ``python -m muster.agent.oci --cleanup NODE JOB`` started *as the user*: the agent
(root) never opens those user-owned paths.

When the job is over here: its batch script ended (this is its batch node), the
controller terminated the whole job here (cancel, time limit, requeue, node failure), or
sent its end-of-job message (op ``epilog``: every node of the allocation gets it when the
job's resources are released, whether or not an Epilog is configured; only a batch job's
batch host is spared it when no node script is configured, having seen the end itself) —
and nothing of it still runs here. So every node of a job removes its containers, however
the job ends; a node that is away when the job ends does so when it is back (the message
waits in the controller's outbox). Between the steps of an allocation none of these
happens, so the containers stay for its next step. The table survives an agent restart
(``<SlurmdSpoolDir>/container-jobs.json``, root's, 0600, rewritten on each change: only
container jobs change it): a job noted before a restart is still cleaned when its end
arrives after it (the controller's outbox holds the end-of-job message while the node is
away).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys

from muster.agent import oci
from muster.common import securefs

__all__ = ["ContainerJobs"]

log = logging.getLogger("muster.agent")


class ContainerJobs:
    """Per node: job -> (uid, gid, groups, conf_dir) of jobs that ran a container task, and
    the jobs among them that are over (cleaned once nothing of them runs). ``path``: where
    the table is kept across restarts (None: in memory only)."""

    def __init__(self, node: str, path: str | None = None):
        self.node, self.path = node, path
        self.users: dict[int, tuple[int, int, list[int], str]] = {}
        self.over: set[int] = set()
        self._load()

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            with open(self.path) as fh:
                saved = json.load(fh)
            for jid, (uid, gid, groups, conf_dir, over) in saved.items():
                self.users[int(jid)] = (int(uid), int(gid), [int(g) for g in groups],
                                        str(conf_dir))
                if over:
                    self.over.add(int(jid))
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as exc:  # damaged: what it held is lost
            log.warning("%s: container job table unreadable, starting empty: %s", self.path, exc)

    def _save(self) -> None:
        if self.path is None:
            return
        try:
            securefs.write_private_json(
                self.path, {str(j): [*u, j in self.over] for j, u in self.users.items()})
        except OSError as exc:
            log.warning("%s: cannot save the container job table: %s", self.path, exc)

    def note(self, L: dict) -> None:
        """A launch (batch or step): remember the job when it asks for a container."""
        if oci.wanted(L.get("env") or {}) and isinstance(L.get("uid"), int):
            entry = (L["uid"], L["gid"], list(L.get("groups") or []), L.get("conf_dir") or "")
            if self.users.get(L["job_id"]) != entry or L["job_id"] in self.over:
                self.users[L["job_id"]] = entry
                self.over.discard(L["job_id"])
                self._save()

    def ended(self, job_id: int, busy: bool) -> None:
        """The job is over on this node (module doc); clean now unless something of it still
        runs (then :meth:`idle` does, when the last of it ends)."""
        if job_id in self.users:
            if job_id not in self.over:
                self.over.add(job_id)
                self._save()
            if not busy:
                self.idle(job_id)

    def idle(self, job_id: int) -> None:
        """Nothing of the job runs here now."""
        if job_id not in self.over:
            return
        self.over.discard(job_id)
        uid, gid, groups, conf_dir = self.users.pop(job_id)
        self._save()
        if os.getuid() != 0 and os.getuid() != uid:
            return  # an unprivileged agent runs only its own user's jobs
        root = os.getuid() == 0
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-m", "muster.agent.oci", "--conf", conf_dir,
                 "--cleanup", self.node, str(job_id)], cwd="/", env={"PATH": oci.DEFAULT_PATH},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, user=uid if root else None,
                group=gid if root else None, extra_groups=groups if root else None)
        except OSError as exc:
            log.warning("job %s: cannot remove its containers: %s", job_id, exc)
            return
        _reap_later(proc)


def _reap_later(proc: subprocess.Popen) -> None:
    """Collect the cleanup's exit on the agent's loop (its pidfd), never blocking it."""
    try:
        loop = asyncio.get_running_loop()
        fd = os.pidfd_open(proc.pid)
    except (RuntimeError, OSError):
        proc.wait()
        return

    def done() -> None:
        loop.remove_reader(fd)
        os.close(fd)
        proc.wait()
    loop.add_reader(fd, done)
