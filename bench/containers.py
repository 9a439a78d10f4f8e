"""Container start overhead per step: a bare ``srun true`` beside ``srun --container-image=…
true`` with the user's image cache emptied first (cold: the unpack is in the step) and with
the image already unpacked (warm), on a private 1-node cluster, as the test user.

    sudo .venv/bin/python bench/containers.py [--repeat N] [--payload-mb M]

The image is a busybox root filesystem tarball plus ``--payload-mb`` MB of incompressible
files (a stand-in for a real image's libraries; default 200). Wall time of the whole srun
command (allocation, launch, the task, the step's end) is what a user waits; the median and
the range of ``--repeat`` runs are printed (the machine is shared: the minimum is the stable
figure).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import statistics
import sys
import tarfile
import tempfile
import time

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(_REPO, "tests"))

from cluster import TEST_USER, private_cluster  # noqa: E402


def make_image(workdir: str, payload_mb: int) -> str:
    root = tempfile.mkdtemp(prefix="rootfs-", dir=workdir)
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy(shutil.which("busybox") or "/bin/busybox", os.path.join(root, "bin", "busybox"))
    os.symlink("busybox", os.path.join(root, "bin", "true"))
    os.makedirs(os.path.join(root, "usr", "lib", "payload"))
    for i in range(payload_mb):
        with open(os.path.join(root, "usr", "lib", "payload", f"f{i}"), "wb") as fh:
            fh.write(os.urandom(1 << 20))
    path = os.path.join(workdir, "bench-image.tar")
    with tarfile.open(path, "w") as tf:
        tf.add(root, arcname=".")
    os.chmod(path, 0o644)
    shutil.rmtree(root)
    return path


def timed(c, argv: list[str]) -> float:
    t0 = time.perf_counter()
    r = c.run(argv, user=TEST_USER, cwd=c.workdir, timeout=600)
    dt = time.perf_counter() - t0
    if r.rc != 0:
        raise RuntimeError(f"{argv}: {r}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--payload-mb", type=int, default=200)
    a = ap.parse_args()
    cache = os.path.join("/tmp", f"muster-oci-{pwd.getpwnam(TEST_USER).pw_uid}", "images")
    results: dict[str, list[float]] = {"bare": [], "cold": [], "warm": []}
    with private_cluster("muster-bench-oci-", nodes=1, cpus=4, mem=8000, gpus=0) as c:
        image = make_image(c.workdir, a.payload_mb)
        step = ["srun", "-N1", f"--container-image={image}", "true"]
        timed(c, ["srun", "-N1", "true"])  # first-step costs of the cluster itself
        for _ in range(a.repeat):
            results["bare"].append(timed(c, ["srun", "-N1", "true"]))
            shutil.rmtree(cache, ignore_errors=True)
            results["cold"].append(timed(c, step))
            results["warm"].append(timed(c, step))
    bare = statistics.median(results["bare"])
    print(f"image: busybox + {a.payload_mb} MB payload, {a.repeat} runs each, as {TEST_USER}")
    print("| step | median | range | over a bare step |")
    print("|---|---|---|---|")
    for key, label in (("bare", "bare `srun true`"), ("cold", "container, cold cache (unpack)"),
                       ("warm", "container, warm cache")):
        xs = results[key]
        med = statistics.median(xs)
        over = "-" if key == "bare" else f"+{(med - bare) * 1000:.0f} ms"
        print(f"| {label} | {med * 1000:.0f} ms | {min(xs) * 1000:.0f}–{max(xs) * 1000:.0f} ms "
              f"| {over} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
