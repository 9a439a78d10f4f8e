"""Accounts, associations and QOS through the real sacctmgr; association enforcement and
default accounts at submit; sprio/sshare layouts; fair-share reorders two users' jobs."""

import os
import time

import pytest

from cluster import TEST_USER, TEST_USER2, private_cluster, user_exists, wait_for

CONF = ("AccountingStorageEnforce=associations,limits,qos\n"
        "PriorityWeightFairShare=10000\nPriorityWeightPartition=1000\n"
        "PriorityWeightAge=1000\nPriorityWeightQOS=1000\n")


@pytest.fixture(scope="module")
def c():
    if os.getuid() != 0 or not (user_exists(TEST_USER) and user_exists(TEST_USER2)):
        pytest.skip("needs root and the two test users")
    with private_cluster("muster-acct-", nodes=1, gpus=0, cpus=4, partitions="gpu", extra_conf=CONF) as cl:
        yield cl



def queue(c, jid, fmt):
    return c.run(["squeue", "-h", "-j", str(jid), "-o", fmt]).out.strip()


def test_fresh_cluster_accepts_jobs_and_sacctmgr_manages_associations(c):
    w = c.workdir
    # nothing configured yet: the old default accounts still work
    jid = c.sbatch("--wrap", "true", user=TEST_USER, cwd=w)
    assert queue(c, jid, "%a") in ("default", "")
    assert "Adding Account(s)" in c.ok("sacctmgr", "-i", "add", "account", "research",
                                      "Fairshare=60", "Description=Research")
    c.ok("sacctmgr", "-i", "add", "account", "prod", "Fairshare=40")
    assert " Nothing new added." in c.run(["sacctmgr", "-i", "add", "account", "prod"]).out
    c.ok("sacctmgr", "-i", "add", "user", TEST_USER, "Account=research")
    c.ok("sacctmgr", "-i", "add", "user", TEST_USER2, "DefaultAccount=prod")
    out = c.ok("sacctmgr", "show", "assoc", "format=cluster,account,user,share,qos")
    lines = out.splitlines()
    assert lines[0] == "   Cluster    Account       User     Share                  QOS "
    assert lines[1] == "---------- ---------- ---------- --------- -------------------- "
    body = [" ".join(ln.split()) for ln in lines[2:]]
    assert body[:2] == ["muster root 1 normal", "muster root root 1 normal"]
    assert "muster research 60 normal" in body and "muster prod 40 normal" in body
    p = c.ok("sacctmgr", "-n", "-P", "show", "user", "format=user,defaultaccount")
    assert f"{TEST_USER}|research" in p.splitlines()
    # durable: a controller restart keeps them
    from cluster import restart_controller
    restart_controller(c)
    assert "research" in c.ok("sacctmgr", "-n", "-P", "show", "account", "format=account")
    # non-operators may not change anything
    r = c.run(["sacctmgr", "-i", "add", "account", "evil"], user=TEST_USER)
    assert r.rc == 1 and "privilege" in r.err


def test_association_enforcement_and_default_account(c):
    w = c.workdir
    jid = c.sbatch("--wrap", "true", user=TEST_USER, cwd=w)
    assert queue(c, jid, "%a") == "research" or c.run(
        ["sacct", "-j", str(jid), "-n", "-X", "-P", "-o", "Account"]).out.strip() == "research"
    r = c.run(["sbatch", "-A", "prod", "--wrap", "true"], user=TEST_USER, cwd=w)
    assert r.rc != 0
    assert "Invalid account or account/partition combination specified" in r.err
    c.ok("sacctmgr", "-i", "add", "user", "nobody", "Account=prod")
    c.ok("sacctmgr", "-i", "delete", "user", "nobody")
    assert "nobody" not in c.ok("sacctmgr", "-n", "-P", "show", "user", "format=user")
    c.ok("sacctmgr", "-i", "modify", "account", "where", "name=prod", "set", "Fairshare=50")
    assert "50" in c.ok("sacctmgr", "-n", "-P", "show", "assoc", "where", "account=prod",
                      "format=account,user,share").splitlines()[0]
    r = c.run(["sbatch", "-q", "nosuchqos", "--wrap", "true"], user=TEST_USER, cwd=w)
    assert r.rc != 0 and "Invalid qos specification" in r.err


def test_sprio_sshare_layout_and_fairshare_reorders_pending_jobs(c):
    w = c.workdir
    # user 1 builds up usage: 4 CPUs for ~3 s
    u = c.sbatch("-n", "4", "--wrap", "sleep 3", user=TEST_USER, cwd=w)
    c.wait_done(u)
    wait_for(lambda: any(line.split("|")[1] == TEST_USER and int(line.split("|")[2]) > 0
                         for line in c.ok("sshare", "-a", "-n", "-P", "-o",
                                        "account,user,rawusage").splitlines()),
             what="usage recorded")
    sh = c.ok("sshare", "-a").splitlines()
    assert sh[0].startswith("Account                    User  RawShares  NormShares")
    assert sh[2].startswith("root ")
    assert any(line.startswith("  research") and TEST_USER[:10] in line for line in sh)
    # the node is busy; user 1 submits first, user 2 second: user 2 has the better share
    blocker = c.sbatch("-n", "4", "--wrap", "sleep 6", cwd=w)
    c.wait_state(blocker, "RUNNING")
    a = c.sbatch("-n", "4", "--wrap", "true", user=TEST_USER, cwd=w)
    time.sleep(1.1)
    b = c.sbatch("-n", "4", "--wrap", "true", user=TEST_USER2, cwd=w)
    wait_for(lambda: queue(c, a, "%Q") not in ("", "1") and queue(c, b, "%Q") not in ("", "1"),
             what="priorities computed")
    assert int(queue(c, b, "%Q")) > int(queue(c, a, "%Q"))
    out = c.ok("sprio").splitlines()
    assert out[0] == ("          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE"
                      "  PARTITION        QOS")
    assert any(line.split()[0] == str(b) for line in out[1:])
    lng = c.ok("sprio", "-l").splitlines()[0]
    assert lng.split() == ["JOBID", "PARTITION", "USER", "PRIORITY", "SITE", "AGE", "ASSOC",
                           "FAIRSHARE", "JOBSIZE", "PARTITION", "QOS", "NICE", "TRES"]
    wt = c.ok("sprio", "-w").splitlines()[1].split()
    assert wt[0] == "Weights" and wt[1:] == ["1", "1000", "10000", "1000", "1000"]
    c.wait_done(b, timeout=60)
    c.wait_done(a, timeout=60)
    start = {j: c.run(["sacct", "-j", str(j), "-X", "-n", "-P", "-o", "Start"]).out.strip()
             for j in (a, b)}
    assert start[b] <= start[a]
