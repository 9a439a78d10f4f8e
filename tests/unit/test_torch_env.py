"""PyTorch's variables in a step's environment: the user's values win, Muster's own (from an
outer step) are replaced (common.torchenv, agent.stepd.task_env). Pure functions."""

from muster.agent.stepd import task_env
from muster.common.torchenv import TORCH_MARKER, TORCH_VARS, torch_marker, user_env_for_step


def test_nothing_set_muster_adds_all():
    base, added = user_env_for_step({"PATH": "/bin", "SLURM_JOB_ID": "7"})
    assert added == TORCH_VARS
    assert base == {"PATH": "/bin", "SLURM_JOB_ID": "7"}


def test_user_values_are_kept_and_not_added():
    env = {"MASTER_ADDR": "10.9.9.9", "MASTER_PORT": "29500", "WORLD_SIZE": "8"}
    base, added = user_env_for_step(env)
    assert base == env
    assert "MASTER_ADDR" not in added and "MASTER_PORT" not in added
    assert "WORLD_SIZE" not in added and "RANK" in added and "NODE_RANK" in added


def test_an_outer_steps_values_are_musters_and_replaced():
    outer = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "20001", "RANK": "3", "FOO": "x"}
    outer[TORCH_MARKER] = "MASTER_ADDR=127.0.0.1,MASTER_PORT=20001,RANK=3"
    base, added = user_env_for_step(outer)
    assert base == {"FOO": "x"}
    assert added == TORCH_VARS
    assert TORCH_MARKER in outer  # the input is not modified


def test_a_value_changed_since_the_outer_step_is_the_users():
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "31234",
           TORCH_MARKER: "MASTER_ADDR=127.0.0.1,MASTER_PORT=20001"}
    base, added = user_env_for_step(env)
    assert base == {"MASTER_PORT": "31234"}
    assert "MASTER_ADDR" in added and "MASTER_PORT" not in added


def test_a_forged_or_malformed_marker_cannot_remove_other_variables():
    env = {"PATH": "/bin", "HOME": "/root", "RANK": "5",
           TORCH_MARKER: "PATH=/bin,HOME,=x,,RANK"}
    base, added = user_env_for_step(env)
    assert base == {"PATH": "/bin", "HOME": "/root", "RANK": "5"}
    assert "RANK" not in added


def test_marker_lists_added_names_with_their_values():
    env = {"MASTER_ADDR": "127.0.0.2", "RANK": "1", "MASTER_PORT": "9"}
    assert torch_marker(env, ("MASTER_ADDR", "RANK")) == "MASTER_ADDR=127.0.0.2,RANK=1"


def _launch(torch_vars):
    return {"torch_vars": torch_vars, "task_gpus": None}


def test_task_env_sets_ranks_and_the_marker():
    common = {"MASTER_ADDR": "127.0.0.1", "SLURM_JOB_ID": "4"}
    env = task_env(common, _launch(["MASTER_ADDR", "RANK", "LOCAL_RANK"]), 1, 3)
    assert (env["SLURM_PROCID"], env["RANK"], env["SLURM_LOCALID"], env["LOCAL_RANK"]) == (
        "3", "3", "1", "1")
    assert env[TORCH_MARKER] == "MASTER_ADDR=127.0.0.1,RANK=3,LOCAL_RANK=1"
    # a nested srun in this task replaces all of them
    assert user_env_for_step(env)[1] == TORCH_VARS


def test_task_env_keeps_a_users_rank():
    env = task_env({"RANK": "0"}, _launch(["LOCAL_RANK"]), 1, 3)
    assert env["RANK"] == "0" and env["SLURM_PROCID"] == "3" and env["LOCAL_RANK"] == "1"
    assert env[TORCH_MARKER] == "LOCAL_RANK=1"


def test_task_env_from_an_older_controller_sets_ranks_unmarked():
    env = task_env({}, _launch(None), 0, 2)
    assert env["RANK"] == "2" and env["LOCAL_RANK"] == "0" and TORCH_MARKER not in env
