"""Which --mail-type events a job's changes send (muster.controller.mail.Mailer), without
running MailProg: with no event loop the mails stay queued, and the test reads the queue."""

from __future__ import annotations

from types import SimpleNamespace

from muster.controller.mail import Mailer
from muster.model.job import Job


class _State:
    def __init__(self):
        self.jobs: dict[int, Job] = {}
        self.stored: list[int] = []
        self.store = SimpleNamespace(put_job=lambda rec: self.stored.append(rec["job_id"]))

    def array_members(self, array_id):
        return [j for j in self.jobs.values() if j.array_job_id == array_id]


def _mailer(domain=None):
    raw = {"MailProg": "/opt/mailprog"}
    if domain:
        raw["MailDomain"] = domain
    cfg = SimpleNamespace(raw=raw, mail_prog="/opt/mailprog", cluster_name="c")
    st = _State()
    return Mailer(cfg, st), st


def _job(jid=5, types="BEGIN,END", **kw):
    j = Job(job_id=jid, name="n", user="alice", uid=1000, account="a", partition="p",
            submit_time=100, mail_type=types, **kw)
    return j


def _subjects(m):
    return [(argv[2], argv[3]) for argv, _ in m.queue]


def _run(j, t0=110, t1=130, state="COMPLETED", code=0):
    j.state, j.start_time = "RUNNING", t0
    yield
    j.state, j.end_time, j.exit_code = state, t1, code
    yield


def test_begin_end_once_each_and_the_default_recipient():
    m, st = _mailer(domain="example.org")
    j = _job()
    for _ in _run(j):
        m.on_save(j)
        m.on_save(j)  # saved again with nothing new: nothing sent
    assert _subjects(m) == [
        ("Slurm Job_id=5 Name=n Began, Queued time 00:00:10", "alice@example.org"),
        ("Slurm Job_id=5 Name=n Ended, Run time 00:00:20, COMPLETED, ExitCode 0",
         "alice@example.org")]
    assert j.mail_sent == [0, 3]
    env = m.queue[0][1]
    assert env["SLURM_JOB_MAIL_TYPE"] == "Began" and env["SLURM_JOB_ID"] == "5"


def test_fail_or_end_by_final_state():
    m, _ = _mailer()
    for types, state, want in (("FAIL", "TIMEOUT", "Failed"), ("END", "FAILED", "Ended"),
                               ("FAIL", "COMPLETED", None), ("END", "CANCELLED", "Ended"),
                               ("FAIL", "DEADLINE", "Failed")):
        m.queue.clear()
        j = _job(types=types, mail_user="ops@x.org")
        for _ in _run(j, state=state, code=1):
            m.on_save(j)
        got = [s for s, _ in _subjects(m)]
        assert (got[0].split()[3].rstrip(",") if got else None) == want, (types, state, got)


def test_requeue_then_a_new_run():
    m, _ = _mailer()
    j = _job(types="BEGIN,REQUEUE")
    j.state, j.start_time = "RUNNING", 110
    m.on_save(j)
    j.state, j.end_time, j.requeue_pending = "CANCELLED", 120, True  # being requeued
    m.on_save(j)
    j.state, j.restarts, j.requeue_pending = "PENDING", 1, False
    j.start_time = j.end_time = None
    m.on_save(j)
    j.state, j.start_time = "RUNNING", 140
    m.on_save(j)
    assert [s.split(" Name=n ")[1] for s, _ in _subjects(m)] == [
        "Began, Queued time 00:00:10", "Requeued, Run time 00:00:10",
        "Began, Queued time 00:00:40"]


def test_array_without_array_tasks_mails_first_begin_and_one_summary():
    m, st = _mailer()
    master = _job(jid=7, types="BEGIN,END", array_job_id=7, pending_tasks=[2])
    st.jobs[7] = master
    t1 = _job(jid=8, types="BEGIN,END", array_job_id=7, array_task_id=1)
    st.jobs[8] = t1
    for _ in _run(t1, code=0):
        m.on_save(t1)
    master.pending_tasks, master.array_task_id = None, 2  # the last task keeps the id
    for _ in _run(master, state="FAILED", code=3):
        m.on_save(master)
    assert [s for s, _ in _subjects(m)] == [
        "Slurm Array Task Job_id=7_1 (8) Name=n Began, Queued time 00:00:10",
        "Slurm Array Summary Job_id=7_* (7) Name=n Ended, Mixed, ExitCode [0-3]"]
    assert 7 in st.stored  # the "array began" mark went to the master record


def test_time_limit_mails_once_per_threshold():
    m, st = _mailer()
    j = _job(types="TIME_LIMIT_50,TIME_LIMIT", time_limit=10)
    st.jobs[5] = j
    j.state, j.start_time = "RUNNING", 1000
    m.on_save(j)
    assert m.timed == {5}
    assert m.tick(st.jobs, 1000 + 299) == []
    assert m.tick(st.jobs, 1000 + 300) == [j]
    assert m.tick(st.jobs, 1000 + 400) == []
    m.tick(st.jobs, 1000 + 600)
    assert [s.split(" Name=n ")[1] for s, _ in _subjects(m)] == [
        "Reached 50% of time limit, Run time 00:05:00", "Reached time limit, Run time 00:10:00"]
    j.state = "TIMEOUT"
    m.tick(st.jobs, 1000 + 700)
    assert m.timed == set()
