"""``scancel J.S`` and ``scancel -s SIG J.S``: one step, and the job runs on.

The ``cancel`` request carries step references in ``steps`` (``{job_id, task, step_id}``;
scancel sends them apart from whole jobs). Slurm 23.11's rules (scancel.c, slurmctld's
job_step_signal):

* ``J.S`` names the job whose id is J, ``J_T.S`` task T of array J — never the array's other
  tasks. ``-b``/``-f`` never widen a step id to the job: they are not even sent.
* No signal, or SIGKILL: the step ends as a cancel ends a job's steps
  (:meth:`StepManager.kill_step`: ``*** STEP J.S … CANCELLED ***``, SIGCONT+SIGTERM, SIGKILL
  after KillWait; its record becomes CANCELLED). Another signal goes to its tasks alone.
* Each reference gets one outcome, checked in this order (``errors`` entries carry ``step``
  = the reference as written, ``code`` and ``error``; the CLI maps them to Slurm's messages
  and exit codes):

  - job unknown or finished → ``invalid_job_id`` with ``job_found: False`` (scancel's own
    check of the job list: exit 1);
  - not among the jobs ``filters`` select (``-u``, ``-p``…, which only narrow named ids), or
    pending → nothing: scancel skips a pending job for a step id (it has no steps);
  - another user's job, caller not an operator → ``access_denied``. Slurm's slurmctld answers
    ``Invalid user id`` here; Muster answers as for a whole job (as ``scontrol update`` does,
    docs/design.md "Compatibility decisions");
  - the job is ending (completing) → ``already_done``;
  - no such running step → ``invalid_job_id`` with ``job_found: True`` (slurmctld's answer).

The step table is the controller's memory (:class:`StepManager`), which a controller restart
empties: until then a step started earlier reads as unknown.
"""

from __future__ import annotations

from muster.common.errors import CODES
from muster.model.job import PENDING, RUNNING

__all__ = ["cancel_steps", "step_name"]


def step_name(ref: dict) -> str:
    """``J.S`` or ``J_T.S``, as scancel names a step in its messages."""
    task = ref.get("task")
    base = str(ref["job_id"]) if task is None else f"{ref['job_id']}_{task}"
    return f"{base}.{ref['step_id']}"


def _job_of(st, job_id: int, task: int | None):
    """The job J (task None) or task T of array J; a task still pending inside its array's
    record resolves to that record (pending: skipped)."""
    if task is None:
        return st.jobs.get(job_id)
    for j in st.jobs.values():
        if j.array_job_id == job_id and j.array_task_id == task:
            return j
    master = st.jobs.get(job_id)
    if master is not None and master.pending_tasks and task in master.pending_tasks:
        return master
    return None


def _error(name: str, code: str, **extra) -> dict:
    return {"step": name, "code": code, "error": CODES[code][0], **extra}


def _outcome(ctl, ref: dict, uid: int, keep: set[int] | None):
    """(step, None) to act on, (None, error) to report, or (None, None) to skip quietly."""
    name = step_name(ref)
    job = _job_of(ctl.state, ref["job_id"], ref.get("task"))
    if job is None or job.terminal:
        return None, _error(name, "invalid_job_id", job_found=False)
    if (keep is not None and job.job_id not in keep) or job.state == PENDING:
        return None, None
    if job.uid != uid and not ctl.is_admin(uid):
        return None, _error(name, "access_denied")
    if job.state != RUNNING or job.completing:
        return None, _error(name, "already_done")
    step = ctl.steps.steps.get((job.job_id, ref["step_id"]))
    if step is None:
        return None, _error(name, "invalid_job_id", job_found=True)
    return step, None


def cancel_steps(ctl, refs: list[dict], uid: int, sig: int | None,
                 keep: set[int] | None = None) -> dict:
    """End or signal each referenced step (module doc); ``keep``: the job ids the request's
    filters select, None without filters. ``{"done": [names], "errors": [...]}``."""
    done, errors = [], []
    for ref in refs:
        step, err = _outcome(ctl, ref, uid, keep)
        if err is not None:
            errors.append(err)
        elif step is not None:
            ctl.steps.kill_step(step, sig)
            ctl.state.event(ctl.state.jobs.get(step.job_id), "step_signalled",
                            f"step {step.step_id}: {'cancel' if sig is None else f'signal {sig}'}"
                            f" by uid {uid}")
            done.append(step_name(ref))
    return {"done": done, "errors": errors}
