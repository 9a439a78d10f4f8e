"""muster.agent.cgroup.favor_dynmods: what it mounts, with which options, and that it never
raises -- against a fake mountinfo and a recording mount(2) (the real mounts are in
tests/integration/test_favordynmods.py)."""

import errno
import os

from muster.agent import cgroup as cg

V1_LINE = "32 31 0:29 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory\n"


def v2_line(point, super_opts, mount_opts="rw,nosuid,nodev,noexec,relatime"):
    return f"41 31 0:38 / {point} {mount_opts} - cgroup2 cgroup2 {super_opts}\n"


class Mounter:
    """Records mount(2) calls; ``sticks``: rewrite the mountinfo file as the kernel would."""

    def __init__(self, info, sticks=True, fail=None):
        self.info, self.sticks, self.fail, self.calls = info, sticks, fail, []

    def __call__(self, source, target, fstype, flags, data):
        self.calls.append((source, target, fstype, flags, data))
        if self.fail:
            raise OSError(self.fail, os.strerror(self.fail))
        if not self.sticks:
            return
        lines = [ln for ln in self.info.read_text().splitlines(True)
                 if f" {target} " not in ln]
        self.info.write_text("".join(lines) + v2_line(target, "rw," + data))


def test_already_set_mounts_nothing(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(V1_LINE + v2_line("/sys/fs/cgroup/unified", "rw,favordynmods"))
    m = Mounter(info)
    ok, line = cg.favor_dynmods(str(info), mount=m)
    assert ok and "already has favordynmods" in line and m.calls == []


def test_missing_option_remounts_keeping_every_other_option(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(V1_LINE + v2_line("/sys/fs/cgroup", "rw,nsdelegate,memory_recursiveprot"))
    m = Mounter(info)
    ok, line = cg.favor_dynmods(str(info), mount=m)
    assert ok, line
    assert line.startswith("remounted cgroup2 at /sys/fs/cgroup with favordynmods")
    [(source, target, fstype, flags, data)] = m.calls
    assert (source, target, fstype) == ("cgroup2", "/sys/fs/cgroup", "cgroup2")
    # MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC: the mount point's own flags survive
    assert flags == 32 | 2 | 4 | 8
    assert data == "nsdelegate,memory_recursiveprot,favordynmods"


def test_read_only_mount_stays_read_only(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(v2_line("/sys/fs/cgroup", "ro", mount_opts="ro,relatime"))
    m = Mounter(info)
    assert cg.favor_dynmods(str(info), mount=m)[0]
    assert m.calls[0][3] == 32 | 1 and m.calls[0][4] == "favordynmods"


def test_v1_only_host_gets_a_private_cgroup2_left_mounted(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(V1_LINE)
    m = Mounter(info)
    ok, line = cg.favor_dynmods(str(info), private_parent=str(tmp_path), mount=m)
    assert ok, line
    [(source, target, fstype, flags, data)] = m.calls
    assert os.path.dirname(target) == str(tmp_path)
    assert os.path.basename(target).startswith("muster-cgroup2-") and os.path.isdir(target)
    assert (fstype, flags, data) == ("cgroup2", 2 | 4 | 8, "favordynmods")
    assert f"mounted a private cgroup2 at {target}" in line


def test_old_kernel_is_logged_not_fatal_and_leaves_no_directory(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(V1_LINE)
    m = Mounter(info, fail=errno.EINVAL)
    ok, line = cg.favor_dynmods(str(info), private_parent=str(tmp_path), mount=m)
    assert not ok
    assert "cannot set favordynmods" in line and "Linux before 6.0" in line
    assert [p.name for p in tmp_path.iterdir()] == ["mountinfo"]
    info.write_text(v2_line("/sys/fs/cgroup", "rw"))
    ok, line = cg.favor_dynmods(str(info), mount=Mounter(info, fail=errno.EPERM))
    assert not ok and "Operation not permitted" in line


def test_an_option_that_does_not_stick_is_reported(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(v2_line("/sys/fs/cgroup", "rw"))
    ok, line = cg.favor_dynmods(str(info), mount=Mounter(info, sticks=False))
    assert not ok and "did not stick" in line


def test_only_restricts_to_the_given_mounts(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(v2_line("/sys/fs/cgroup/unified", "rw,favordynmods") + v2_line("/x", "rw"))
    m = Mounter(info)
    assert cg.favor_dynmods(str(info), only=["/x"], mount=m)[0]
    assert [c[1] for c in m.calls] == ["/x"]
