"""Keys and state directories (security issue, item 5): `muster up` and musterctld refuse a
state directory or key that someone else owns or may write, and never adopt one a hostile user
prepared; a fresh state directory and key get the right owner and mode."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import tempfile

import pytest

from cluster import BIN, TEST_USER, user_exists


def _up(state: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", ""),
           "MUSTER_CONF": os.path.join(state, "slurm.conf"), "MUSTER_NO_API": "1"}
    return subprocess.run([os.path.join(BIN, "muster"), "up", "--no-link", "--state-dir", state,
                           "--nodes", "1", "--timeout", "20"], capture_output=True, text=True,
                          env=env, timeout=60)


@pytest.fixture
def base():
    if os.getuid() != 0 or not user_exists(TEST_USER):
        pytest.fail("run as root with the test users (scripts/test.sh creates them)")
    d = tempfile.mkdtemp(prefix="muster-statedir-")
    os.chmod(d, 0o755)
    yield d
    for root, _dirs, files in os.walk(d):
        if "muster.pids" in files:  # a cluster that should not have started: stop it
            subprocess.run([os.path.join(BIN, "muster"), "down", "--state-dir", root],
                           capture_output=True, timeout=60)
    subprocess.run(["rm", "-rf", d])


def _chown_to_test_user(path: str) -> None:
    pw = pwd.getpwnam(TEST_USER)
    os.chown(path, pw.pw_uid, pw.pw_gid)


def test_state_dir_owned_by_another_user_is_refused(base):
    state = os.path.join(base, "state")
    os.mkdir(state, 0o755)
    _chown_to_test_user(state)  # as if a hostile user had created it first
    r = _up(state)
    assert r.returncode == 1
    assert "muster: error: state directory" in r.stderr and "owned by uid" in r.stderr
    assert "Traceback" not in r.stderr
    assert os.listdir(state) == []  # nothing of ours was written into it


def test_group_or_world_writable_state_dir_is_refused(base):
    state = os.path.join(base, "state")
    os.mkdir(state)
    os.chmod(state, 0o777)
    r = _up(state)
    assert r.returncode == 1 and "writable by group or others" in r.stderr, r.stderr


def test_symlinked_state_dir_is_refused(base):
    real = os.path.join(base, "real")
    os.mkdir(real, 0o755)
    os.symlink(real, os.path.join(base, "link"))
    r = _up(os.path.join(base, "link"))
    assert r.returncode == 1 and "symbolic link" in r.stderr, r.stderr


@pytest.mark.parametrize("problem", ["owner", "mode"])
def test_existing_key_must_be_ours_and_private(base, problem):
    state = os.path.join(base, "state")
    os.mkdir(state, 0o755)
    key = os.path.join(state, "muster.key")
    with open(key, "w") as fh:
        fh.write("a" * 64 + "\n")
    os.chmod(key, 0o600)
    if problem == "owner":
        _chown_to_test_user(key)  # the user who planted it knows it
    else:
        os.chmod(key, 0o644)
    r = _up(state)
    assert r.returncode == 1 and "muster.key" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(state, "muster.pids"))  # no daemon was started


def test_controller_refuses_an_unsafe_state_save_location(base):
    """musterctld itself (started by hand or a supervisor, not through `muster up`) checks."""
    state = os.path.join(base, "state")
    os.mkdir(state, 0o755)
    conf = os.path.join(state, "slurm.conf")
    with open(conf, "w") as fh:
        fh.write(f"ClusterName=t\nSlurmctldHost=localhost(127.0.0.1)\nStateSaveLocation={state}\n"
                 "NodeName=node1 NodeAddr=127.0.0.1 CPUs=1 RealMemory=100\n"
                 "PartitionName=p Nodes=node1 Default=YES\n")
    os.chmod(state, 0o775)
    r = subprocess.run([os.path.join(BIN, "musterctld"), "-f", conf, "-D"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1
    assert "StateSaveLocation" in r.stderr and "writable by group or others" in r.stderr, r.stderr


def test_agent_refuses_a_spool_prepared_by_another_user(base):
    """musterd will not run jobs out of a spool directory a user made (they could plant links
    or read launch descriptions there)."""
    from muster.common.auth import generate_key
    state = os.path.join(base, "state")
    os.mkdir(state, 0o755)
    key = os.path.join(state, "muster.key")
    generate_key(key)
    spool = os.path.join(state, "spool", "node1")
    os.makedirs(spool, 0o711)
    _chown_to_test_user(spool)
    conf = os.path.join(state, "slurm.conf")
    with open(conf, "w") as fh:
        fh.write(f"ClusterName=t\nSlurmctldHost=localhost(127.0.0.1)\nStateSaveLocation={state}\n"
                 f"AuthInfo=key={key}\nSlurmdSpoolDir={state}/spool/%n\n"
                 "NodeName=node1 NodeAddr=127.0.0.1 CPUs=1 RealMemory=100\n"
                 "PartitionName=p Nodes=node1 Default=YES\n")
    r = subprocess.run([os.path.join(BIN, "musterd"), "-f", conf, "-N", "node1", "-D"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "musterd: error: SlurmdSpoolDir" in r.stderr and "owned by uid" in r.stderr, r.stderr


def test_fresh_state_dir_and_key_get_owner_and_mode(base):
    state = os.path.join(base, "fresh", "state")
    r = _up(state)
    assert r.returncode == 0, r.stderr
    st = os.stat(state)
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o022 == 0
    kst = os.stat(os.path.join(state, "muster.key"))
    assert kst.st_uid == os.getuid() and stat.S_IMODE(kst.st_mode) == 0o600


# ---- a local cluster's spools in memory (muster up: /dev/shm/muster-<random>) --------------

def test_a_spool_directory_a_user_made_at_the_configured_name_is_refused(base):
    """The spool directory's name is in slurm.conf, which every user may read. After `muster
    down` removed it, a hostile user makes a directory of that name before the next `muster up
    --config`: the agent refuses it (they could plant links or read launch descriptions), the
    cluster does not start, and the reason is logged."""
    state = os.path.join(base, "state")
    r = _up(state)
    assert r.returncode == 0, r.stderr
    spools = os.readlink(os.path.join(state, "spool"))
    conf = os.path.join(state, "slurm.conf")
    assert f"SlurmdSpoolDir={spools}/%n" in open(conf).read()
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", ""),
           "MUSTER_CONF": conf, "MUSTER_NO_API": "1"}
    r = subprocess.run([os.path.join(BIN, "muster"), "down", "--state-dir", state],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and not os.path.lexists(spools), r.stderr
    os.mkdir(spools, 0o711)
    _chown_to_test_user(spools)  # the hostile user's, at the name the configuration gives
    try:
        r = subprocess.run([os.path.join(BIN, "muster"), "up", "--no-link", "--state-dir", state,
                            "--config", conf, "--timeout", "20"], capture_output=True, text=True,
                           env=env, timeout=60)
        assert r.returncode == 1 and "musterd for node1 exited" in r.stderr, r
        logs = "".join(open(os.path.join(state, "log", f)).read()
                       for f in os.listdir(os.path.join(state, "log")) if f.startswith("musterd"))
        assert "SlurmdSpoolDir" in logs and "owned by uid" in logs, logs
        assert os.listdir(spools) == []  # nothing of ours was written into it
    finally:
        subprocess.run([os.path.join(BIN, "muster"), "down", "--state-dir", state],
                       capture_output=True, env=env, timeout=60)
        subprocess.run(["rm", "-rf", spools])


def test_a_runtime_base_or_spool_owned_by_another_user_is_not_used(base, monkeypatch):
    """$XDG_RUNTIME_DIR is the caller's to set: root does not put its spools in a directory
    another user owns (they could rename ours away and put theirs in its place), and a spool
    link whose directory is now another user's is replaced by a fresh directory of ours."""
    from muster.cli import muster as up
    foreign = os.path.join(base, "xdg")
    os.mkdir(foreign, 0o700)
    _chown_to_test_user(foreign)
    monkeypatch.setattr(up, "RUNTIME_BASES", ("XDG_RUNTIME_DIR",))
    monkeypatch.setenv("XDG_RUNTIME_DIR", foreign)
    monkeypatch.setattr(up, "_fstype", lambda path: "tmpfs")  # the type is the only fake
    assert up._runtime_base() is None
    ours = os.path.join(base, "ours")
    os.mkdir(ours, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", ours)
    state = os.path.join(base, "state2")
    os.mkdir(state, 0o755)
    first = os.path.dirname(up._spool_template(state))
    assert os.path.dirname(first) == ours and os.stat(first).st_uid == 0
    _chown_to_test_user(first)  # now another user's
    second = os.path.dirname(up._spool_template(state))
    assert second != first and os.stat(second).st_uid == 0
    assert os.readlink(os.path.join(state, "spool")) == second
