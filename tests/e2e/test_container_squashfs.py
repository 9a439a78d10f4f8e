"""enroot's squashfs images as ``--container-image`` (pyxis users' ``*.sqsh`` files), on a real
cluster with rootless runc: unpacked with unsquashfs into the user's cache, the image's
``/etc/environment`` as the container's environment, on every node of a multi-node step."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from cluster import TEST_USER, private_cluster, user_exists

BUSYBOX = shutil.which("busybox")

pytestmark = [
    pytest.mark.skipif(os.getuid() != 0, reason="the agents must run as root to switch users"),
    pytest.mark.skipif(shutil.which("runc") is None, reason="runc is not installed"),
    pytest.mark.skipif(BUSYBOX is None, reason="busybox-static is not installed"),
    pytest.mark.skipif(not user_exists(TEST_USER), reason=f"no user {TEST_USER}"),
]


@pytest.fixture(scope="module")
def cc():
    with private_cluster("muster-sqsh-", nodes=2, cpus=2, mem=4000, gpus=0) as c:
        yield c


def _sqsh(cc, name: str, environment: str) -> str:
    """A busybox root filesystem with ``environment`` as /etc/environment, packed by
    mksquashfs as ``enroot import`` does (with a /dev/null node, which a user cannot unpack)."""
    root = os.path.join(cc.workdir, name + ".d")
    os.makedirs(os.path.join(root, "bin"))
    os.makedirs(os.path.join(root, "etc"))
    for d in ("proc", "dev", "sys", "tmp", "run"):
        os.makedirs(os.path.join(root, d))
    shutil.copy(BUSYBOX, os.path.join(root, "bin", "busybox"))
    for applet in ("sh", "echo", "readlink", "cat"):
        os.symlink("busybox", os.path.join(root, "bin", applet))
    os.mknod(os.path.join(root, "dev", "null"), 0o666 | 0o020000, os.makedev(1, 3))
    with open(os.path.join(root, "etc", "environment"), "w") as fh:
        fh.write(environment)
    out = os.path.join(cc.workdir, name + ".sqsh")
    subprocess.run(["mksquashfs", root, out, "-noappend", "-quiet", "-no-progress"],
                   check=True, capture_output=True)
    os.chmod(out, 0o644)
    return out


def test_a_squashfs_image_runs_on_every_node_with_its_environment(cc):
    img = _sqsh(cc, "env", "# enroot writes the image's ENV here\nexport FROM_IMAGE=\"kept\"\n"
                           "PATH=/bin\nSTEP_OVERRIDES=image\nnot a line\n")
    r = cc.run(["srun", "-N2", "-l", f"--container-image={img}",
                "--container-env=STEP_OVERRIDES", "sh", "-c",
                "echo $FROM_IMAGE $STEP_OVERRIDES $(readlink /bin/sh) $PATH"],
               user=TEST_USER, cwd=cc.workdir, env={"STEP_OVERRIDES": "step"}, timeout=120)
    assert r.rc == 0, r
    assert sorted(r.out.splitlines()) == [f"{t}: kept step busybox /bin" for t in (0, 1)], r


def test_a_corrupt_squashfs_image_fails_the_step_with_the_reason(cc):
    img = os.path.join(cc.workdir, "bad.sqsh")
    with open(img, "wb") as fh:
        fh.write(b"hsqs" + b"\0" * 200)  # the magic, then nothing a squashfs holds
    os.chmod(img, 0o644)
    r = cc.run(["srun", "-N1", f"--container-image={img}", "true"], user=TEST_USER,
               cwd=cc.workdir, timeout=120)
    assert r.rc != 0, r
    assert f"unpack {img}" in r.err, r


def test_container_save_round_trips_through_a_squashfs_image(cc):
    """pyxis's --container-save: a writable container's changes saved as a squashfs image
    that a later step runs from; a save that cannot be written fails the step."""
    img = _sqsh(cc, "base", "PATH=/bin\n")
    saved = os.path.join(cc.workdir, "saved.sqsh")
    r = cc.run(["srun", "-N1", f"--container-image={img}", "--container-writable",
                "--container-save=saved.sqsh", "sh", "-c", "echo made-inside >/made"],
               user=TEST_USER, cwd=cc.workdir, timeout=120)
    assert r.rc == 0, r
    with open(saved, "rb") as fh:
        assert fh.read(4) == b"hsqs"
    r = cc.run(["srun", "-N1", f"--container-image={saved}", "cat", "/made"],
               user=TEST_USER, cwd=cc.workdir, timeout=120)
    assert (r.rc, r.out) == (0, "made-inside\n"), r
    r = cc.run(["srun", "-N1", f"--container-image={img}", "--container-save=/proc/nope.sqsh",
                "true"], user=TEST_USER, cwd=cc.workdir, timeout=120)
    assert r.rc != 0 and "error: container: save /proc/nope.sqsh" in r.err, r
