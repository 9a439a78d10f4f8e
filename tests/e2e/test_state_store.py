"""A real cluster on each state store (issue 16): ``muster up`` with ``MusterStateStore=
postgresql://…`` (a private server, tests/pg.py) and with the SQLite default runs a batch job
and an srun step to completion, sacct shows both; ``muster backup`` takes a snapshot while the
controller runs, ``muster restore`` refuses a store in use and restores into a fresh one."""

from __future__ import annotations

import os

import pytest

from cluster import private_cluster, wait_for
from muster.store import open_store


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_cluster_on_the_store_with_backup_and_restore(kind, request):
    url = request.getfixturevalue("pg_server").new_db() if kind == "postgres" else None
    extra = f"MusterStateStore={url}" if url else ""
    with private_cluster("muster-store-", nodes=2, cpus=4, extra_conf=extra) as c:
        store_url = url or os.path.join(c.state_dir, "muster.db")
        out = os.path.join(c.workdir, "job.out")
        jid = c.sbatch("-o", out, "--wrap", "srun -n1 echo hello-from-step", cwd=c.workdir)
        assert c.wait_done(jid) == "COMPLETED"
        rows = wait_for(lambda: (r := c.ok("sacct", "-j", str(jid), "-P", "-n", "-o",
                                           "JobID,State")).count("COMPLETED") >= 3 and r,
                        what="job, batch and step completed in sacct")
        assert {f"{jid}|COMPLETED", f"{jid}.batch|COMPLETED", f"{jid}.0|COMPLETED"} <= \
            set(rows.split()), rows
        with open(out) as fh:
            assert "hello-from-step" in fh.read()
        source = open_store(store_url, migrate=False)
        assert source.get_job(jid)["state"] == "COMPLETED"  # the state lives in this store
        steps = source.steps_of([jid])
        source.close()

        bk = os.path.join(os.path.dirname(c.state_dir), "state.backup")
        r = c.run(["muster", "backup", "--config", c.conf, bk])  # online: the controller runs
        assert r.rc == 0 and "jobs" in r.out, r
        assert os.stat(bk).st_mode & 0o777 == 0o600
        r = c.run(["muster", "backup", "--config", c.conf, bk])
        assert r.rc == 1 and "File exists" in r.err, r  # never over an existing file
        r = c.run(["muster", "restore", "--config", c.conf, bk])
        assert r.rc == 1 and "musterctld is running" in r.err, r
        r = c.run(["muster", "restore", "--config", c.conf, "--to", store_url, "--force", bk])
        assert r.rc == 1 and "in use by another process" in r.err, r  # the controller's claim

        c.down()
        target = os.path.join(os.path.dirname(c.state_dir), "restored.db")
        r = c.run(["muster", "restore", "--config", c.conf, "--to", target, bk])
        assert r.rc == 0 and "Restored" in r.out, r
        restored = open_store(target)
        assert restored.get_job(jid)["state"] == "COMPLETED"
        assert restored.steps_of([jid]) == steps
        restored.close()
        r = c.run(["muster", "restore", "--config", c.conf, "--to", target, bk])
        assert r.rc == 1 and "already holds jobs" in r.err, r
