"""Batch jobs end to end through the real CLI on a real 4-node cluster."""

import os
import pwd
import time

from cluster import TEST_USER2, wait_for


def read(path):
    with open(path) as fh:
        return fh.read()


def env_of(path):
    out = {}
    for line in read(path).splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v
    return out


def test_submit_runs_and_writes_output(cluster, workdir):
    r = cluster.run(["sbatch", "--wrap", "echo hello from $SLURM_JOB_ID"], cwd=workdir)
    assert r.rc == 0, r
    assert r.out.startswith("Submitted batch job ")
    jid = int(r.out.split()[-1])
    assert cluster.wait_done(jid) == "COMPLETED"
    assert read(os.path.join(workdir, f"slurm-{jid}.out")) == f"hello from {jid}\n"


def test_batch_environment_matches_slurm(cluster, workdir):
    script = os.path.join(workdir, "env.sh")
    with open(script, "w") as fh:
        fh.write("#!/bin/bash\n#SBATCH --gres=gpu:2\n#SBATCH -N1\n#SBATCH -J envbatch\nenv | sort\n")
    jid = cluster.sbatch("-o", "env_%j.out", script, cwd=workdir)
    assert cluster.wait_done(jid) == "COMPLETED"
    env = env_of(os.path.join(workdir, f"env_{jid}.out"))
    assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == str(jid)
    assert env["SLURM_JOB_NAME"] == "envbatch"
    assert env["SLURM_JOB_NUM_NODES"] == env["SLURM_NNODES"] == "1"
    assert env["SLURM_JOB_NODELIST"].startswith("node")
    assert env["SLURMD_NODENAME"] == env["SLURM_JOB_NODELIST"]
    assert env["CUDA_VISIBLE_DEVICES"] == env["SLURM_JOB_GPUS"]
    assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    assert env["SLURM_GPUS_ON_NODE"] == "2"
    assert env["SLURM_SUBMIT_DIR"] == workdir
    assert env["SLURM_CPUS_ON_NODE"] == "1"
    assert env["SLURM_TASKS_PER_NODE"] == "1"
    assert env["SLURM_PROCID"] == env["SLURM_LOCALID"] == env["SLURM_NODEID"] == "0"
    assert env["ENVIRONMENT"] == "BATCH"
    assert "SLURM_RESTART_COUNT" not in env
    assert env["SLURM_JOB_PARTITION"] == "gpu"
    assert int(env["SLURM_TASK_PID"]) > 1
    assert env["PWD"] == workdir


def test_multinode_env_and_cpus(cluster, workdir):
    jid = cluster.sbatch("-N2", "--ntasks-per-node=2", "-c2", "--gpus-per-node=2", "-o", "mn.out",
                         "--wrap", "env | sort", cwd=workdir)
    assert cluster.wait_done(jid) == "COMPLETED"
    env = env_of(os.path.join(workdir, "mn.out"))
    assert env["SLURM_JOB_NUM_NODES"] == "2"
    assert env["SLURM_NTASKS"] == env["SLURM_NPROCS"] == "4"
    assert env["SLURM_TASKS_PER_NODE"] == "2(x2)"
    assert env["SLURM_JOB_CPUS_PER_NODE"] == "4(x2)"
    assert env["SLURM_CPUS_PER_TASK"] == "2"
    assert env["SLURM_NTASKS_PER_NODE"] == "2"
    assert "[" in env["SLURM_JOB_NODELIST"]  # compressed hostlist of two nodes


def test_jobs_run_as_submitter(cluster, workdir, test_user):
    pw = pwd.getpwnam(test_user)
    jid = cluster.sbatch("-o", "who.out", "--wrap", "id -u; id -g; pwd; touch mine",
                         user=test_user, cwd=workdir)
    assert cluster.wait_done(jid) == "COMPLETED"
    uid, gid, cwd = read(os.path.join(workdir, "who.out")).split()
    assert (int(uid), int(gid), cwd) == (pw.pw_uid, pw.pw_gid, workdir)
    st = os.stat(os.path.join(workdir, "mine"))
    assert st.st_uid == pw.pw_uid
    assert os.stat(os.path.join(workdir, "who.out")).st_uid == pw.pw_uid


def test_user_cannot_touch_others_jobs(cluster, workdir, test_user):
    jid = cluster.sbatch("-H", "--wrap", "true", user=test_user, cwd=workdir)
    for cmd in (["scancel", str(jid)], ["scontrol", "release", str(jid)],
                ["scontrol", "update", f"JobId={jid}", "TimeLimit=5"]):
        r = cluster.run(cmd, user=TEST_USER2)
        assert r.rc != 0, (cmd, r)
        assert "Access/permission denied" in r.err
    r = cluster.run(["scancel", str(jid)], user=TEST_USER2)
    assert r.rc == 210
    assert cluster.state_of(jid) == "PENDING"
    assert cluster.run(["scancel", str(jid)], user=test_user).rc == 0
    assert cluster.wait_state(jid, "CANCELLED")


def test_exit_codes_and_states(cluster, workdir):
    ok = cluster.sbatch("--wrap", "true", cwd=workdir)
    bad = cluster.sbatch("--wrap", "exit 3", cwd=workdir)
    killed = cluster.sbatch("--wrap", "kill -9 $$", cwd=workdir)
    assert cluster.wait_done(ok) == "COMPLETED"
    assert cluster.wait_done(bad) == "FAILED"
    assert cluster.wait_done(killed) == "FAILED"
    assert cluster.job(bad)["exit"] == "3:0"
    assert cluster.job(killed)["exit"] == "0:9"
    r = cluster.run(["sacct", "-j", str(bad), "-P", "-n", "-o", "JobID,State,ExitCode"])
    assert r.out.splitlines() == [f"{bad}|FAILED|3:0", f"{bad}.batch|FAILED|3:0"]


def test_sbatch_wait_returns_exit_code(cluster, workdir):
    r = cluster.run(["sbatch", "-W", "--wrap", "exit 3"], cwd=workdir)
    assert r.rc == 3 and r.out.startswith("Submitted batch job")
    r = cluster.run(["sbatch", "-W", "--wrap", "kill -9 $$"], cwd=workdir)
    assert r.rc == 1


def test_time_limit_enforced(cluster, workdir):
    jid = cluster.sbatch("-t", "0:01", "-o", "tl.out", "--wrap", "sleep 120", cwd=workdir)
    assert cluster.wait_done(jid, timeout=150) == "TIMEOUT"
    out = read(os.path.join(workdir, "tl.out"))
    assert f"*** JOB {jid} ON " in out and "DUE TO TIME LIMIT" in out
    r = cluster.run(["sacct", "-j", str(jid), "-P", "-n", "-o", "JobID,State,ExitCode"])
    lines = r.out.splitlines()
    assert lines[0] == f"{jid}|TIMEOUT|0:0"
    assert lines[1].startswith(f"{jid}.batch|CANCELLED|0:15")


def test_cancel_running_job_writes_message(cluster, workdir):
    jid = cluster.sbatch("-o", "c.out", "--wrap", "echo started; sleep 300", cwd=workdir)
    cluster.wait_state(jid, "RUNNING")
    wait_for(lambda: "started" in read(os.path.join(workdir, "c.out")), what="job output")
    assert cluster.run(["scancel", str(jid)]).rc == 0
    assert cluster.wait_done(jid) == "CANCELLED"
    assert f"*** JOB {jid} ON " in read(os.path.join(workdir, "c.out"))
    r = cluster.run(["sacct", "-j", str(jid), "-X", "-P", "-n", "-o", "State"])
    assert r.out.strip() == "CANCELLED by 0"


def test_scancel_signal_batch_only(cluster, workdir):
    script = "trap 'echo got USR1; exit 7' USR1; echo ready; while true; do sleep 0.1; done"
    jid = cluster.sbatch("-o", "sig.out", "--wrap", script, cwd=workdir)
    wait_for(lambda: "ready" in read(os.path.join(workdir, "sig.out")) if os.path.exists(
        os.path.join(workdir, "sig.out")) else False, what="ready")
    assert cluster.run(["scancel", "--batch", "--signal=USR1", str(jid)]).rc == 0
    assert cluster.wait_done(jid) == "FAILED"
    assert "got USR1" in read(os.path.join(workdir, "sig.out"))
    assert cluster.job(jid)["exit"] == "7:0"


def test_output_patterns_and_open_mode(cluster, workdir):
    path = os.path.join(workdir, "keep.out")
    with open(path, "w") as fh:
        fh.write("earlier\n")
    jid = cluster.sbatch("-J", "pat", "-o", "%x-%j-%u-%N.log", "-e", "err-%j.log",
                         "--wrap", "echo out; echo err >&2", cwd=workdir)
    a = cluster.sbatch("--open-mode=append", "-o", path, "--wrap", "echo appended", cwd=workdir)
    assert cluster.wait_done(jid) == "COMPLETED"
    assert cluster.wait_done(a) == "COMPLETED"
    node = cluster.job(jid)["nodes"]
    assert read(os.path.join(workdir, f"pat-{jid}-root-{node}.log")) == "out\n"
    assert read(os.path.join(workdir, f"err-{jid}.log")) == "err\n"
    assert read(path) == "earlier\nappended\n"


def test_array_job(cluster, workdir):
    r = cluster.run(["sbatch", "--array=1-7:2%2", "-o", "arr_%A_%a.out", "--wrap",
                     "echo $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT "
                     "$SLURM_ARRAY_TASK_MIN $SLURM_ARRAY_TASK_MAX $SLURM_ARRAY_TASK_STEP; sleep 0.5"],
                    cwd=workdir)
    assert r.rc == 0, r
    aid = int(r.out.split()[-1])
    seen_throttle = []

    def all_done():
        out = cluster.run(["squeue", "-h", "-o", "%i %t", "-t", "all"]).out
        mine = [line for line in out.splitlines() if line.startswith(f"{aid}_")]
        seen_throttle.append(sum(1 for line in mine if line.endswith(" R")))
        return mine and all(line.split()[1] == "CD" for line in mine) and len(mine) == 4
    wait_for(all_done, timeout=60, what="array done")
    assert max(seen_throttle) <= 2
    for t in (1, 3, 5, 7):
        assert read(os.path.join(workdir, f"arr_{aid}_{t}.out")) == f"{aid} {t} 4 1 7 2\n"
    r = cluster.run(["sacct", "-j", str(aid), "-X", "-P", "-n", "-o", "JobID,State"])
    assert sorted(r.out.splitlines()) == sorted(f"{aid}_{t}|COMPLETED" for t in (1, 3, 5, 7))


def test_pending_array_display(cluster, workdir):
    jid = cluster.sbatch("-H", "--array=1-6%2", "--wrap", "true", cwd=workdir)
    r = cluster.run(["squeue", "-h", "-j", str(jid), "-o", "%i|%t|%r"])
    assert r.out.strip() == f"{jid}_[1-6%2]|PD|JobHeldUser"
    r = cluster.run(["squeue", "-h", "-r", "-j", str(jid), "-o", "%i"])
    assert r.out.split() == [f"{jid}_{i}" for i in range(1, 7)]
    assert cluster.run(["scancel", f"{jid}_3"]).rc == 0
    r = cluster.run(["squeue", "-h", "-j", str(jid), "-o", "%i"])
    assert f"{jid}_[1-2,4-6%2]" in r.out.split()
    assert cluster.run(["scancel", str(jid)]).rc == 0
    wait_for(lambda: cluster.run(["squeue", "-h", "-j", str(jid)]).out.strip() == "",
             what="array gone from queue")


def test_dependencies(cluster, workdir):
    first = cluster.sbatch("--wrap", "sleep 1", cwd=workdir)
    after_ok = cluster.sbatch(f"--dependency=afterok:{first}", "--wrap", "true", cwd=workdir)
    after_fail = cluster.sbatch("-d", f"afternotok:{first}", "--wrap", "true", cwd=workdir)
    r = cluster.run(["squeue", "-h", "-j", str(after_ok), "-o", "%r %E"])
    assert r.out.split() == ["Dependency", f"afterok:{first}(unfulfilled)"]
    assert cluster.wait_done(after_ok) == "COMPLETED"
    wait_for(lambda: cluster.run(["squeue", "-h", "-j", str(after_fail), "-o", "%r"]).out.strip()
             == "DependencyNeverSatisfied", what="never satisfied")
    cluster.run(["scancel", str(after_fail)])
    r = cluster.run(["sbatch", "--dependency=afterok:99999999", "--wrap", "true"], cwd=workdir)
    assert r.rc == 1 and "Job dependency problem" in r.err


def test_singleton(cluster, workdir):
    a = cluster.sbatch("-J", "solo", "--wrap", "sleep 1", cwd=workdir)
    b = cluster.sbatch("-J", "solo", "-d", "singleton", "--wrap", "true", cwd=workdir)
    assert cluster.run(["squeue", "-h", "-j", str(b), "-o", "%r"]).out.strip() == "Dependency"
    assert cluster.wait_done(b) == "COMPLETED"
    assert cluster.state_of(a) == "COMPLETED"


def test_hold_release_and_update(cluster, workdir):
    jid = cluster.sbatch("-H", "-t", "10", "--wrap", "true", cwd=workdir)
    r = cluster.run(["squeue", "-h", "-j", str(jid), "-o", "%t %r %l %Q"])
    assert r.out.split() == ["PD", "JobHeldUser", "10:00", "0"]
    assert cluster.run(["scontrol", "update", f"JobId={jid}", "TimeLimit=5"]).rc == 0
    assert "TimeLimit=00:05:00" in cluster.run(["scontrol", "show", "job", str(jid)]).out
    assert cluster.run(["scontrol", "release", str(jid)]).rc == 0
    assert cluster.wait_done(jid) == "COMPLETED"


def test_begin_time(cluster, workdir):
    jid = cluster.sbatch("--begin=now+2", "--wrap", "true", cwd=workdir)
    assert cluster.run(["squeue", "-h", "-j", str(jid), "-o", "%r"]).out.strip() == "BeginTime"
    t0 = time.time()
    assert cluster.wait_done(jid) == "COMPLETED"
    assert time.time() - t0 > 0.5


def test_requeue_running_job(cluster, workdir):
    jid = cluster.sbatch("-o", "rq.out", "--open-mode=append", "--wrap",
                         "echo run ${SLURM_RESTART_COUNT:-0}; sleep 600", cwd=workdir)
    cluster.wait_state(jid, "RUNNING")
    wait_for(lambda: os.path.exists(os.path.join(workdir, "rq.out")) and "run 0" in read(
        os.path.join(workdir, "rq.out")), what="first run")
    assert cluster.run(["scontrol", "requeue", str(jid)]).rc == 0
    wait_for(lambda: "run 1" in read(os.path.join(workdir, "rq.out")), timeout=30, what="second run")
    r = cluster.run(["scontrol", "show", "job", str(jid)])
    assert "Restarts=1" in r.out
    cluster.run(["scancel", str(jid)])
    assert cluster.wait_done(jid) == "CANCELLED"
    r = cluster.run(["sacct", "--duplicates", "-j", str(jid), "-X", "-P", "-n", "-o", "JobID,State"])
    assert r.out.splitlines()[0] == f"{jid}|REQUEUED"


def test_gpus_are_disjoint_on_shared_nodes(cluster, workdir):
    ids = [cluster.sbatch("-w", "node4", "--gres=gpu:3", "-o", f"g{i}.out", "--wrap",
                          "echo $CUDA_VISIBLE_DEVICES; sleep 2", cwd=workdir) for i in range(2)]
    for jid in ids:
        assert cluster.wait_done(jid) == "COMPLETED"
    sets = [set(read(os.path.join(workdir, f"g{i}.out")).strip().split(",")) for i in range(2)]
    assert all(len(s) == 3 for s in sets)
    assert not sets[0] & sets[1]


def test_pending_reasons_resources_and_priority(cluster, workdir):
    big = [cluster.sbatch("--gres=gpu:8", "-N4", "--wrap", "sleep 30", cwd=workdir)]
    cluster.wait_state(big[0], "RUNNING")
    blocked = cluster.sbatch("--gres=gpu:8", "-N4", "--wrap", "true", cwd=workdir)
    behind = cluster.sbatch("--gres=gpu:1", "--wrap", "true", cwd=workdir)
    wait_for(lambda: cluster.run(["squeue", "-h", "-j", str(blocked), "-o", "%r"]).out.strip()
             == "Resources", what="Resources")
    assert cluster.run(["squeue", "-h", "-j", str(behind), "-o", "%r"]).out.strip() == "Priority"
    cluster.run(["scancel", str(big[0])])
    assert cluster.wait_done(blocked) == "COMPLETED"
    assert cluster.wait_done(behind) == "COMPLETED"


def test_squeue_filters_with_projected_formats(cluster, workdir):
    """Client-side filters (-n, -p, -A, -q, -w) combined with the default and custom formats,
    which fetch only some fields of each job."""
    jid = cluster.sbatch("-H", "-J", "projname", "--wrap", "true", cwd=workdir)
    for fmt in ([], ["-o", "%i"], ["-o", "%i %t %j"]):
        for flt in (["-n", "projname"], ["-p", "gpu"], ["-A", "root"], ["-q", "normal"]):
            r = cluster.run(["squeue", "-h", *flt, *fmt])
            assert r.rc == 0, (flt, fmt, r)
            assert str(jid) in r.out, (flt, fmt, r.out)
    r = cluster.run(["squeue", "-h", "-w", "node1", "-o", "%i"])
    assert r.rc == 0 and str(jid) not in r.out.split()
    cluster.run(["scancel", str(jid)])


def test_time_limit_update_keeps_a_running_batch_job(cluster, workdir):
    """`scontrol update TimeLimit=` on a running batch job reaches its supervisor (SIGUSR2 to
    re-read the limit) and must not kill it: the job goes on and ends COMPLETED."""
    go = os.path.join(workdir, "go")
    jid = cluster.sbatch("-t", "5", "--wrap", f"while [ ! -e {go} ]; do sleep 0.05; done; echo done",
                         cwd=workdir)
    cluster.wait_state(jid, "RUNNING")
    cluster.ok("scontrol", "update", f"JobId={jid}", "TimeLimit=10")
    wait_for(lambda: "TimeLimit=00:10:00" in cluster.ok("scontrol", "show", "job", str(jid)),
             what="new limit shown")
    # the supervisor has been woken (the agent writes limit.json, then SIGUSR2); give it the
    # chance to die from it before the job is let go
    spool = os.path.join(cluster.state_dir, "spool")
    wait_for(lambda: any(os.path.exists(os.path.join(root, "limit.json"))
                         for root, _d, _f in os.walk(spool) if f"job{jid}." in root),
             what="limit.json in the job's spool")
    assert cluster.state_of(jid) == "RUNNING"
    open(go, "w").close()
    assert cluster.wait_done(jid) == "COMPLETED"
    assert read(os.path.join(workdir, f"slurm-{jid}.out")) == "done\n"
