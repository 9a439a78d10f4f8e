"""``--mail-type``/``--mail-user``: notifications through slurm.conf's MailProg, as slurmctld
sends them (agent.c ``mail_job_info``/``_mail_proc``).

MailProg runs as ``MailProg -s "<subject>" <user>`` with stdin from /dev/null and Slurm's
``SLURM_JOB_*`` variables in its environment; the user is ``--mail-user``, else the job's user
name (``@MailDomain`` appended when slurm.conf sets it). Subjects, as Slurm words them::

    Slurm Job_id=12 Name=train Began, Queued time 00:00:03
    Slurm Job_id=12 Name=train Ended, Run time 00:10:00, COMPLETED, ExitCode 0
    Slurm Job_id=12 Name=train Failed, Run time 00:00:07, FAILED, ExitCode 3
    Slurm Job_id=12 Name=train Requeued, Run time 00:04:12
    Slurm Job_id=12 Name=train Reached 80% of time limit, Run time 00:48:00
    Slurm Array Task Job_id=7_3 (10) Name=sweep Began, Queued time 00:00:01
    Slurm Array Summary Job_id=7_* (7) Name=sweep Ended, COMPLETED, ExitCode [0-0]

When (Slurm's job_completion_logger): BEGIN when the job starts; at the end, a COMPLETED or
CANCELLED job sends END (REQUEUE instead when it is being requeued and REQUEUE was asked),
any other end (FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, DEADLINE) sends FAIL,
else END; INVALID_DEPEND when a dependency can never be satisfied; TIME_LIMIT_50/80/90 and
TIME_LIMIT (100 %) once each per run. An array without ARRAY_TASKS mails BEGIN once (its
first task) and one summary when its last task ends; with ARRAY_TASKS every task mails.
STAGE_OUT never fires (Muster has no burst buffers).

Detection: every change of a job passes through ``ClusterState.save``, which hands jobs with
a mail type to :meth:`Mailer.on_save`; what was sent for the current run is kept on the job
(``mail_sent = [run, bits]``, persisted with it), so a restarted controller sends nothing
twice. Time-limit mails are checked by :meth:`Mailer.tick` on every scheduling pass, over the
running jobs that asked for them only.

Hostile input: the subject carries the job name, so control characters are replaced (a
newline could add mail headers); ``--mail-user`` was checked at submit (no leading ``-``,
address characters only). At most ``MAX_RUNNING`` MailProg processes run at once, each
killed after ``TIMEOUT`` seconds; at most ``MAX_QUEUED`` mails wait (beyond, new ones are
dropped with a warning in the log, rate-limited).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque

from muster.common import clock
from muster.common.timefmt import fmt_duration_long
from muster.model.job import COMPLETED, PENDING, RUNNING, TERMINAL

log = logging.getLogger("musterctld.mail")

MAX_RUNNING = 4
MAX_QUEUED = 10000
TIMEOUT = 60.0

_BEGIN, _END, _DEPEND, _ARRAY_BEGAN = 1, 2, 4, 8
_TIME_BITS = {"TIME_LIMIT_50": 16, "TIME_LIMIT_80": 32, "TIME_LIMIT_90": 64, "TIME_LIMIT": 128}
_TIME_PCT = {"TIME_LIMIT_50": 50, "TIME_LIMIT_80": 80, "TIME_LIMIT_90": 90, "TIME_LIMIT": 100}
_WORDS = {"BEGIN": "Began", "END": "Ended", "FAIL": "Failed", "REQUEUE": "Requeued",
          "INVALID_DEPEND": "Invalid dependency", "TIME_LIMIT": "Reached time limit",
          "TIME_LIMIT_90": "Reached 90% of time limit",
          "TIME_LIMIT_80": "Reached 80% of time limit",
          "TIME_LIMIT_50": "Reached 50% of time limit"}


def default_mail_prog() -> str:
    """Slurm's default: /bin/mail, or /usr/bin/mail when only that one exists."""
    if not os.path.exists("/bin/mail") and os.path.exists("/usr/bin/mail"):
        return "/usr/bin/mail"
    return "/bin/mail"


def _clean(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)[:1024]


def _ended_word(state: str, types: set[str], requeued: bool) -> str | None:
    """Which end-of-run mail a job asked for, if any (Slurm's job_completion_logger)."""
    if state in (COMPLETED, "CANCELLED", "REQUEUED"):
        if requeued and "REQUEUE" in types:
            return "REQUEUE"
        return "END" if "END" in types else None
    if "FAIL" in types:
        return "FAIL"
    return "END" if "END" in types else None


def subject(job, event: str, now: int, summary: tuple[str, int, int] | None = None) -> str:
    """The mail's subject (module doc). ``summary`` = (state, min, max exit code) of a whole
    array (the Array Summary form)."""
    word = _WORDS[event]
    name = _clean(job.name)
    if summary is not None:
        state, lo, hi = summary
        return (f"Slurm Array Summary Job_id={job.array_job_id}_* ({job.array_job_id}) "
                f"Name={name} {word}, {state}, ExitCode [{lo}-{hi}]")
    tail = ""
    if event == "BEGIN" and job.start_time is not None:
        tail = f", Queued time {fmt_duration_long(max(0, job.start_time - job.submit_time))}"
    elif event in ("END", "FAIL", "REQUEUE") and job.start_time is not None \
            and job.end_time is not None:
        tail = f", Run time {fmt_duration_long(max(0, job.end_time - job.start_time))}"
    elif event.startswith("TIME_LIMIT") and job.start_time is not None:
        tail = f", Run time {fmt_duration_long(max(0, now - job.start_time))}"
    if event in ("END", "FAIL"):
        state = "CANCELLED" if job.state == "REQUEUED" else job.state
        tail += f", {state}" + (f", ExitCode {job.exit_code}" if not job.exit_signal else "")
    if job.array_task_id is not None:
        return (f"Slurm Array Task Job_id={job.array_job_id}_{job.array_task_id} "
                f"({job.job_id}) Name={name} {word}{tail}")
    return f"Slurm Job_id={job.job_id} Name={name} {word}{tail}"


class Mailer:
    """Decides which notifications a job's change calls for and runs MailProg for them."""

    def __init__(self, cfg, state) -> None:
        self.configure(cfg)
        self.state = state
        self.queue: deque[tuple[list[str], dict]] = deque()
        self.running = 0
        self.timed: set[int] = set()  # running jobs that asked for TIME_LIMIT* mails
        self._dropped_at = 0.0

    def configure(self, cfg) -> None:
        """MailProg, MailDomain, the cluster name: at start and on reconfigure."""
        raw = getattr(cfg, "raw", None) or {}
        self.prog = cfg.mail_prog if "MailProg" in raw else default_mail_prog()
        self.domain = (raw.get("MailDomain") or "").strip() or None
        self.cluster = cfg.cluster_name

    def track_loaded(self, jobs) -> None:
        """After a restart: running jobs that still expect time-limit mails."""
        for job in jobs:
            if job.state == RUNNING and job.mail_type and any(
                    t in job.mail_type.split(",") for t in _TIME_BITS):
                self.timed.add(job.job_id)

    # ---- deciding ----------------------------------------------------------------------------
    def on_save(self, job) -> None:
        """Called for every saved job that has a mail type (before it is stored)."""
        types = set(job.mail_type.split(","))
        run, bits = job.mail_sent or (job.restarts, 0)
        now = clock.now()
        if run != job.restarts:  # the previous run ended in a requeue we did not see end
            if bits & _BEGIN and not bits & _END:
                word = "REQUEUE" if "REQUEUE" in types else ("END" if "END" in types else None)
                if word:
                    self._send(job, word, now)
            run, bits = job.restarts, 0
        if job.state == RUNNING and not job.completing and not bits & _BEGIN:
            bits |= _BEGIN
            if "BEGIN" in types and self._first_of_array(job, types):
                self._send(job, "BEGIN", now)
            if any(t in types for t in _TIME_BITS):
                self.timed.add(job.job_id)
        if (job.state in TERMINAL or job.state == "REQUEUED") and not bits & _END:
            bits |= _END
            self.timed.discard(job.job_id)
            requeued = bool(job.requeue_pending) or job.state == "REQUEUED"
            word = _ended_word(job.state, types, requeued)
            if word:
                self._ended(job, word, types, requeued, now)
        if job.state == PENDING and job.reason == "DependencyNeverSatisfied" \
                and not bits & _DEPEND:
            bits |= _DEPEND
            if "INVALID_DEPEND" in types:
                self._send(job, "INVALID_DEPEND", now)
        job.mail_sent = [run, bits]

    def _first_of_array(self, job, types: set[str]) -> bool:
        """An array without ARRAY_TASKS mails BEGIN for its first task only (marked on the
        array's master record, which keeps the array id)."""
        if job.array_task_id is None or "ARRAY_TASKS" in types:
            return True
        master = self.state.jobs.get(job.array_job_id)
        holder = master if master is not None else job
        run, bits = holder.mail_sent or (holder.restarts, 0)
        if bits & _ARRAY_BEGAN:
            return False
        holder.mail_sent = [run, bits | _ARRAY_BEGAN]
        if holder is not job:
            self.state.store.put_job(holder.to_store())
        return True

    def _ended(self, job, word: str, types: set[str], requeued: bool, now: int) -> None:
        if job.array_task_id is None or "ARRAY_TASKS" in types or requeued:
            self._send(job, word, now)
            return
        members = self.state.array_members(job.array_job_id)
        if any(m.state in (PENDING, RUNNING) for m in members if m is not job):
            return  # a summary when the last task ends (its state decided, processes or not)
        ends = [m for m in members if m.state in TERMINAL] or [job]
        codes = [m.exit_code for m in ends]
        states = {m.state for m in ends}
        if states <= {COMPLETED, "CANCELLED"}:
            summary: str | None = "END" if "END" in types else None
            state = COMPLETED if states == {COMPLETED} else "CANCELLED"
        else:
            summary = "FAIL" if "FAIL" in types else ("END" if "END" in types else None)
            state = "Mixed" if min(codes) == 0 and max(codes) > 0 else job.state
        if summary:
            self._send(job, summary, now, (state, min(codes), max(codes)))

    def tick(self, jobs: dict, now: int) -> list:
        """TIME_LIMIT* mails due at ``now``; returns the jobs whose ``mail_sent`` changed
        (the caller saves them)."""
        changed = []
        for jid in list(self.timed):
            job = jobs.get(jid)
            if job is None or job.state != RUNNING or job.completing or not job.mail_type:
                self.timed.discard(jid)
                continue
            if job.time_limit is None or job.start_time is None:
                continue
            types = set(job.mail_type.split(","))
            run, bits = job.mail_sent or (job.restarts, 0)
            used = (now - job.start_time) * 100
            for t, bit in _TIME_BITS.items():
                if t in types and not bits & bit and used >= _TIME_PCT[t] * job.time_limit * 60:
                    bits |= bit
                    self._send(job, t, now)
            if [run, bits] != list(job.mail_sent or (run, 0)):
                job.mail_sent = [run, bits]
                changed.append(job)
        return changed

    # ---- sending -----------------------------------------------------------------------------
    def _send(self, job, event: str, now: int, summary=None) -> None:
        if len(self.queue) >= MAX_QUEUED:
            t = clock.monotonic()
            if t - self._dropped_at > 60:
                self._dropped_at = t
                log.warning("mail queue full (%d): dropping notifications", MAX_QUEUED)
            return
        user = job.mail_user or job.user
        if self.domain and "@" not in user:
            user = f"{user}@{self.domain}"
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C",
               "SLURM_JOB_ID": str(job.job_id), "SLURM_JOBID": str(job.job_id),
               "SLURM_JOB_NAME": _clean(job.name), "SLURM_JOB_USER": job.user,
               "SLURM_JOB_UID": str(job.uid), "SLURM_JOB_ACCOUNT": job.account,
               "SLURM_JOB_PARTITION": job.partition, "SLURM_CLUSTER_NAME": self.cluster,
               "SLURM_JOB_STATE": job.state, "SLURM_JOB_MAIL_TYPE": _WORDS[event],
               "SLURM_JOB_WORK_DIR": job.work_dir}
        if job.array_task_id is not None:
            env["SLURM_ARRAY_JOB_ID"] = str(job.array_job_id)
            env["SLURM_ARRAY_TASK_ID"] = str(job.array_task_id)
        argv = [self.prog, "-s", subject(job, event, now, summary), user]
        self.queue.append((argv, env))
        self._pump()

    def _pump(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet (start-up): sent by the next pump
        while self.queue and self.running < MAX_RUNNING:
            argv, env = self.queue.popleft()
            self.running += 1
            loop.create_task(self._run(argv, env))

    async def _run(self, argv: list[str], env: dict) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, cwd="/", env=env, start_new_session=True)
            try:
                out, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                log.error("MailProg %s killed after %ds", argv[0], TIMEOUT)
                return
            if proc.returncode:
                log.error("MailProg returned error %s, its output was '%s'", proc.returncode,
                          out[:512].decode("utf-8", "replace").strip())
        except OSError as exc:
            log.error("MailProg %s could not be run: %s", argv[0], exc)
        finally:
            self.running -= 1
            self._pump()
