"""PyTorch's rendezvous variables in a step's environment: which ones Muster adds and which
are the user's. Pure; shared by the controller (it builds a step's environment) and the agent
(stepd writes the marker into each task), hence in ``common``.
"""

from __future__ import annotations

# Rule: a value the user set wins; Muster adds a PyTorch variable only when it is absent from the
# environment srun was run with. Muster's own values must not count as "the user's" in a nested
# srun (an srun inside a task of an outer step, or a batch job submitted from one): every task
# therefore carries TORCH_MARKER, the names Muster added *with the values it gave them*
# ("MASTER_ADDR=10.0.0.1,MASTER_PORT=20001,RANK=3,..."). A later srun treats a variable as
# Muster's — and replaces it with the new step's value — only when it is listed there with the
# value it still has; one the user changed (or set) since is the user's and is kept. Values are
# addresses and integers, so ',' and '=' never occur in them; a malformed item is ignored (the
# variable then counts as the user's, the safe reading).

TORCH_VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
              "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK")
TORCH_MARKER = "MUSTER_TORCH_VARS"


def user_env_for_step(env: dict) -> tuple[dict, tuple[str, ...]]:
    """srun's environment as the step's base, and the PyTorch variables Muster must add.

    Drops the variables an outer step of Muster set and the task did not change (they belong to
    that step, as the outer step's SLURM_* do) and the marker itself; what is left of
    TORCH_VARS is the user's and stays. Returns (base, names to add), the names in TORCH_VARS
    order. Pure: ``env`` is not modified."""
    base = dict(env)
    for item in (base.pop(TORCH_MARKER, None) or "").split(","):
        name, eq, value = item.partition("=")
        if eq and name in TORCH_VARS and base.get(name) == value:
            del base[name]
    return base, tuple(n for n in TORCH_VARS if n not in base)


def torch_marker(env: dict, added) -> str:
    """TORCH_MARKER's value for a task whose environment ``env`` is final: the ``added`` names
    with the values they have."""
    return ",".join(f"{n}={env[n]}" for n in added if n in env)
