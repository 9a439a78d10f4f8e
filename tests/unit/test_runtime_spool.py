"""``muster up``'s spool location (muster.cli.muster._spool_template): the nodes' spools in a
tmpfs directory of an unpredictable name, linked from the state directory; reused while the
link leads to a directory of ours; the on-disk layout where a state directory already has one
or no tmpfs is usable."""

from __future__ import annotations

import os

import pytest

from muster.cli import muster as up


@pytest.fixture
def tmpfs(tmp_path, monkeypatch):
    """A directory standing in for /dev/shm (the file system type is the only fake)."""
    base = tmp_path / "shm"
    base.mkdir(mode=0o700)
    monkeypatch.setattr(up, "RUNTIME_BASES", (str(base),))
    monkeypatch.setattr(up, "_fstype", lambda path: "tmpfs")
    state = tmp_path / "state"
    state.mkdir()
    return base, state


def test_a_new_state_dir_gets_a_private_spool_in_memory(tmpfs):
    base, state = tmpfs
    tpl = up._spool_template(str(state))
    target = os.readlink(state / "spool")
    assert tpl == os.path.join(target, "%n")
    assert os.path.dirname(target) == str(base)
    assert len(os.path.basename(target)) == len("muster-") + 16  # 64 random bits
    assert os.lstat(target).st_mode & 0o7777 == 0o711
    assert up._spool_template(str(state)) == tpl  # the same cluster again: the same spools
    up._remove_runtime_spool(str(state))
    assert not os.path.lexists(target) and not os.path.lexists(state / "spool")


def test_a_link_to_a_vanished_or_unsafe_directory_is_replaced(tmpfs):
    base, state = tmpfs
    up._spool_template(str(state))
    first = os.readlink(state / "spool")
    os.rmdir(first)  # a reboot emptied the tmpfs
    second = up._spool_template(str(state))
    assert os.path.dirname(second) != first and os.path.isdir(os.path.dirname(second))
    os.chmod(os.path.dirname(second), 0o777)  # writable by others: not trusted any more
    third = up._spool_template(str(state))
    assert third != second and os.lstat(os.path.dirname(third)).st_mode & 0o777 == 0o711


def test_an_existing_spool_directory_and_a_machine_without_tmpfs_stay_on_disk(tmpfs, monkeypatch):
    base, state = tmpfs
    (state / "spool").mkdir()  # a state dir from before (kept jobs are adopted from it)
    assert up._spool_template(str(state)) == os.path.join(state, "spool", "%n")
    os.rmdir(state / "spool")
    monkeypatch.setattr(up, "_fstype", lambda path: "ext4")
    assert up._spool_template(str(state)) == os.path.join(state, "spool", "%n")
    assert not os.path.lexists(state / "spool")  # the agents make it
    assert os.listdir(base) == []


def test_a_base_others_may_write_without_the_sticky_bit_is_not_used(tmpfs):
    base, state = tmpfs
    os.chmod(base, 0o777)
    assert up._runtime_base() is None
    os.chmod(base, 0o1777)  # as /dev/shm: used only when root owns it
    assert up._runtime_base() == (str(base) if os.stat(base).st_uid == 0 else None)


def test_up_with_the_same_configuration_after_down_makes_the_spools_again(tmpfs):
    """`muster down` removes the in-memory spools; `muster up --config` of the configuration
    that names them (the test clusters' way to add settings) makes that directory again
    (0711) and links it, so the agents start and the state directory still leads to it."""
    from types import SimpleNamespace
    base, state = tmpfs
    tpl = up._spool_template(str(state))
    target = os.path.dirname(tpl)
    up._remove_runtime_spool(str(state))
    cfg = SimpleNamespace(slurmd_spool_dir=tpl)
    up._relink_runtime_spool(str(state), cfg)
    assert os.readlink(state / "spool") == target
    assert os.lstat(target).st_mode & 0o7777 == 0o711
    up._relink_runtime_spool(str(state), cfg)  # linked already: nothing to do
    assert os.readlink(state / "spool") == target
    # a spool of an admin's own configuration (not ours, not in memory) is left alone
    os.unlink(state / "spool")
    up._relink_runtime_spool(str(state), SimpleNamespace(slurmd_spool_dir="/var/spool/m/%n"))
    assert not os.path.lexists(state / "spool")
