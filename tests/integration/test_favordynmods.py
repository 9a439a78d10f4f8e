"""favordynmods on real cgroup2 mounts (root, Linux 6.0+): the agent's start-up step that keeps
cgroup migrations off the RCU grace period (muster.agent.cgroup.favor_dynmods).

Every cgroup2 mount shows the one cgroup2 root, and mounting it sets that root's options to
those given: so the fresh private mount of these tests is made with the options the root has
now (nothing on the host changes), and the function is pointed at it (``only=``). Whether the
host had the option before or not, it must be there afterwards.
"""

import ctypes
import os
import platform
import re

import pytest

from muster.agent import cgroup as cg


def _kernel_has_it() -> bool:
    m = re.match(r"(\d+)\.(\d+)", platform.release())
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (6, 0)


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root"),
    pytest.mark.skipif(not _kernel_has_it(), reason="favordynmods needs Linux 6.0+"),
]

MNT_DETACH = 2


def umount(point: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.umount2(point.encode(), MNT_DETACH)
    os.rmdir(point)


def root_options() -> list[str]:
    """The cgroup2 root's options as a mount shows them ([] when nothing mounts it)."""
    mounts = cg.cgroup2_mounts()
    return [o for o in mounts[0][2] if o not in ("rw", "ro")] if mounts else []


def line_of(point: str):
    found = [(m, s) for p, m, s in cg.cgroup2_mounts() if p == point]
    assert found, f"{point} is not a cgroup2 mount"
    return found[0]


@pytest.fixture
def fresh(tmp_path):
    """A fresh cgroup2 mount in a temporary directory, made with the root's current options
    (so making it changes nothing), unmounted afterwards."""
    point = str(tmp_path / "cg2")
    os.mkdir(point)
    cg._mount_syscall("cgroup2", point, "cgroup2", 2 | 4 | 8, ",".join(root_options()))
    yield point
    umount(point)


def test_favor_dynmods_leaves_the_option_on_a_fresh_mount(fresh):
    before = set(line_of(fresh)[1]) - {cg.FAVOR_DYNMODS}
    ok, line = cg.favor_dynmods(only=[fresh])
    assert ok, line
    assert ("already has" in line) or line.startswith(f"remounted cgroup2 at {fresh}")
    mount_opts, super_opts = line_of(fresh)
    assert cg.FAVOR_DYNMODS in super_opts
    assert before <= set(super_opts)  # nsdelegate & co. kept
    assert {"nosuid", "nodev", "noexec"} <= mount_opts


def test_remount_adds_the_option_and_keeps_the_others(fresh):
    """The remount itself (what a host without the option gets), on the fresh mount: it
    passes the root's options, so at most favordynmods is added."""
    mount_opts, super_opts = line_of(fresh)
    cg.remount_favoring(fresh, mount_opts, super_opts)
    after_mount, after_super = line_of(fresh)
    assert cg.FAVOR_DYNMODS in after_super
    assert set(super_opts) - {cg.FAVOR_DYNMODS} <= set(after_super)
    assert {"nosuid", "nodev", "noexec"} <= after_mount


def test_a_host_without_cgroup2_gets_a_private_mount_left_in_place(tmp_path):
    if set(root_options()) - {cg.FAVOR_DYNMODS}:
        pytest.skip("a bare cgroup2 mount would reset this host's cgroup2 options "
                    f"{root_options()}")
    ok, line = cg.favor_dynmods(private_parent=str(tmp_path), only=[])
    points = [p for p, _m, _s in cg.cgroup2_mounts() if p.startswith(str(tmp_path))]
    try:
        assert ok, line
        assert len(points) == 1 and os.path.basename(points[0]).startswith("muster-cgroup2-")
        assert cg.FAVOR_DYNMODS in line_of(points[0])[1]
        assert f"mounted a private cgroup2 at {points[0]}" in line
    finally:
        for p in points:
            umount(p)
