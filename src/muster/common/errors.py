"""One error hierarchy for Muster, mapped at the edges to Slurm messages and exit codes.

Standard library only: the CLI imports this.

    MusterError                      message + Slurm errno-style ``code`` (wire name)
    ├── InputError                   malformed option/value caught before any RPC (exit 255)
    ├── ConfigError                  bad slurm.conf / gres.conf line (file:line in message)
    ├── RequestError                 the controller refused a request (Slurm errstr)
    │   ├── InvalidJobId             "Invalid job id specified"
    │   ├── AccessDenied             "Access/permission denied"
    │   └── ...                      (codes below)
    └── TransportError               "Unable to contact slurm controller (connect failure)"

Every refusal the controller sends carries ``code`` (a stable identifier) and ``message``
(Slurm's exact errstr). The CLI prints ``<prog>: error: <context>: <message>`` and exits with
the code Slurm uses for that command. The REST layer maps ``code`` to an HTTP status.
"""

from __future__ import annotations

# code -> (Slurm errstr, HTTP status)
CODES: dict[str, tuple[str, int]] = {
    "invalid_partition": ("Invalid partition name specified", 400),
    "invalid_account": ("Invalid account or account/partition combination specified", 400),
    "invalid_qos": ("Invalid qos specification", 400),
    "bad_node_config": ("Requested node configuration is not available", 400),
    "invalid_job_id": ("Invalid job id specified", 404),
    "already_done": ("Job/step already completing or completed", 409),
    "access_denied": ("Access/permission denied", 403),
    "invalid_user": ("Invalid user id", 403),
    "invalid_time_limit": ("Requested time limit is invalid (missing or exceeds some limit)", 400),
    "dependency": ("Job dependency problem", 400),
    "invalid_array": ("Invalid job array specification", 400),
    "invalid_gres": ("Invalid generic resource (gres) specification", 400),
    "invalid_feature": ("Invalid feature specification", 400),  # ESLURM_INVALID_FEATURE
    "invalid_license": ("Invalid license specification", 400),  # ESLURM_INVALID_LICENSES
    "invalid_nodelist": ("Invalid node name specified", 400),
    "invalid_request": ("Invalid request", 400),
    "too_large": ("Request too large", 413),
    "not_batch": ("Only batch jobs are accepted or processed", 400),
    "requeue_disabled": ("Requested operation is presently disabled", 409),
    "job_pending": ("Job is pending execution", 409),
    "job_not_pending": ("Job is no longer pending execution", 409),
    "not_held": ("Job is not held", 409),
    # scontrol update job (slurmctld's _update_job): Slurm's errstrs
    "job_held": ("Job is in held state, pending scheduler release", 409),  # ESLURM_JOB_HELD
    "prio_reset_fail": ("Changes to job priority are not persistent, change nice instead", 400),
    "invalid_time_value": ("Invalid time specified", 400),  # ESLURM_INVALID_TIME_VALUE
    "invalid_time_min": ("Invalid time-min specification (exceeds job's time or other limits)",
                         400),  # ESLURM_INVALID_TIME_MIN_LIMIT
    "circular_dependency": ("Circular job dependency", 400),  # ESLURM_CIRCULAR_DEPENDENCY
    "disabled": ("Requested operation is presently disabled", 409),  # ESLURM_DISABLED
    "not_supported": ("Requested operation not supported on this system", 400),
    # scontrol's own refusal of a key it does not know (update_job.c), sent by the controller
    "update_not_supported": ("Update of this parameter is not supported", 400),
    "busy": ("Controller busy, try again", 503),
    # MaxJobCount reached: slurmctld answers EAGAIN, which sbatch retries ("Slurm temporarily
    # unable to accept job, sleeping and retrying") before it gives up with this strerror
    "eagain": ("Resource temporarily unavailable", 503),
    "invalid_nice": ("Invalid --nice value", 400),  # ESLURM_INVALID_NICE
    "invalid_node_count": ("Node count specification invalid", 400),
    "nodes_busy": ("Requested nodes are busy", 409),  # ESLURM_NODES_BUSY (--immediate)
    "bad_task_count": ("Task count specification invalid", 400),
    "invalid_cpu_count": ("CPU count specification invalid", 400),
    "invalid_group": ("Invalid group id", 403),  # ESLURM_GROUP_ID_MISSING
    "accounting_policy": ("Job violates accounting/QOS policy (job submit limit, user's "
                          "size and/or time limits)", 400),
    "auth": ("Authentication failure", 401),
    "no_default_partition": ("No partition specified or system default partition", 400),
    "internal": ("Unexpected controller error", 500),
    "connect": ("Unable to contact slurm controller (connect failure)", 503),
    # a standby controller's answer to all but ping/takeover: clients try the next one
    "in_standby_mode": ("Slurm backup controller in standby mode", 503),
}


class MusterError(Exception):
    """Base of every error Muster raises on purpose."""

    code = "internal"

    def __init__(self, message: str | None = None, code: str | None = None):
        if code is not None:
            self.code = code
        if message is None:
            message = CODES.get(self.code, (self.code, 500))[0]
        super().__init__(message)
        self.message = message

    @property
    def http_status(self) -> int:
        return CODES.get(self.code, ("", 500))[1]

    def to_wire(self) -> dict:
        return {"ok": False, "code": self.code, "error": self.message}


class InputError(MusterError):
    """A malformed option or value, detected without asking the controller."""

    code = "invalid_request"


class ConfigError(MusterError):
    """A configuration file that cannot be used; message names file and line."""

    code = "config"


class RequestError(MusterError):
    """The controller refused a request; ``code`` says why."""

    detail: str | None = None  # an extra line for the client (sbatch prints it), when set


class InvalidJobId(RequestError):
    code = "invalid_job_id"


class AccessDenied(RequestError):
    code = "access_denied"


class AuthError(RequestError):
    code = "auth"


class TransportError(MusterError):
    code = "connect"


def from_wire(reply: dict) -> RequestError:
    """Rebuild the error a controller reply describes."""
    code = reply.get("code", "internal")
    cls = {"invalid_job_id": InvalidJobId, "access_denied": AccessDenied, "auth": AuthError}.get(
        code, RequestError
    )
    return cls(reply.get("error"), code)
