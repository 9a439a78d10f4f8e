"""muster.config.gresfiles: GPU index → device file (gres.conf File=, AutoDetect=nvml), and the
deny list of Slurm's device confinement; muster up's emulated GPU device nodes."""

from __future__ import annotations

import os
import stat
import types
from pathlib import Path

import pytest

from muster.common.errors import ConfigError
from muster.config import load
from muster.config.gresfiles import GpuDevice, deny_list, gpu_devices

HEAD = "ClusterName=t\nSlurmctldHost=ctl(10.0.0.1)\nGresTypes=gpu\n"
root_only = pytest.mark.skipif(os.getuid() != 0, reason="mknod needs root")


def _cfg(tmp_path: Path, gres_line: str, node: str = "NodeName=n1 Gres=gpu:2\n"):
    (tmp_path / "slurm.conf").write_text(HEAD + node + "PartitionName=p Nodes=n1\n")
    (tmp_path / "gres.conf").write_text(gres_line)
    return load(str(tmp_path / "slurm.conf"))


def _numbers(path: str) -> tuple[int, int]:
    rdev = os.stat(path).st_rdev
    return os.major(rdev), os.minor(rdev)


def test_file_order_defines_the_index(tmp_path):
    """File= order is the GPU index (what CUDA_VISIBLE_DEVICES names); each file's real
    (major, minor) comes from stat()."""
    cfg = _cfg(tmp_path, "NodeName=n1 Name=gpu File=/dev/zero,/dev/null\n")
    devs = gpu_devices(cfg.nodes["n1"], cfg.gres_autodetect)
    assert devs == [GpuDevice(0, "/dev/zero", "c", *_numbers("/dev/zero")),
                    GpuDevice(1, "/dev/null", "c", *_numbers("/dev/null"))]


def test_missing_file_is_a_clear_error(tmp_path):
    cfg = _cfg(tmp_path, f"NodeName=n1 Name=gpu File=/dev/null,{tmp_path}/nvidia9\n")
    with pytest.raises(ConfigError) as ei:
        gpu_devices(cfg.nodes["n1"])
    msg = str(ei.value)
    assert "node n1" in msg and "GPU 1" in msg and f"{tmp_path}/nvidia9" in msg
    assert "No such file" in msg


def test_regular_file_is_not_a_gpu(tmp_path):
    (tmp_path / "fake0").write_text("")
    cfg = _cfg(tmp_path, f"NodeName=n1 Name=gpu File=/dev/null,{tmp_path}/fake0\n")
    with pytest.raises(ConfigError, match=r"GPU 1 File=.*fake0: not a character device"):
        gpu_devices(cfg.nodes["n1"])


def test_count_only_lines_have_no_devices(tmp_path):
    """Emulated GPUs without files (AutoDetect=off, Count=): nothing to deny."""
    cfg = _cfg(tmp_path, "AutoDetect=off\nNodeName=n1 Name=gpu Count=2\n")
    assert gpu_devices(cfg.nodes["n1"], cfg.gres_autodetect) == []


def test_autodetect_nvml_maps_minor_numbers(tmp_path):
    """AutoDetect=nvml: NVML device i with minor m is /dev/nvidia<m> (major 195 when the file
    is absent here)."""
    cfg = _cfg(tmp_path, "AutoDetect=nvml\n")
    assert cfg.gres_autodetect == "nvml"
    devs = gpu_devices(cfg.nodes["n1"], cfg.gres_autodetect, minors=lambda: [4, 7])
    assert [(d.index, d.path, d.major, d.minor) for d in devs] == [
        (0, "/dev/nvidia4", 195, 4), (1, "/dev/nvidia7", 195, 7)]


def test_autodetect_with_too_few_gpus_fails(tmp_path):
    cfg = _cfg(tmp_path, "AutoDetect=nvml\n")
    with pytest.raises(ConfigError, match="GPU 1 is configured but NVML .* found 1"):
        gpu_devices(cfg.nodes["n1"], "nvml", minors=lambda: [0])


def test_files_win_over_autodetect(tmp_path):
    cfg = _cfg(tmp_path, "AutoDetect=nvml\nNodeName=n1 Name=gpu File=/dev/zero,/dev/null\n")
    called = []
    devs = gpu_devices(cfg.nodes["n1"], "nvml", minors=lambda: called.append(1) or [])
    assert [d.path for d in devs] == ["/dev/zero", "/dev/null"] and not called


def test_deny_list_is_every_gpu_not_allocated():
    devs = [GpuDevice(i, f"/d/nvidia{i}", "c", 195, i) for i in range(8)]
    assert deny_list(devs, [2, 5]) == [["c", 195, m] for m in (0, 1, 3, 4, 6, 7)]
    assert deny_list(devs, range(8)) == []
    assert deny_list(devs, []) == [["c", 195, m] for m in range(8)]


def test_deny_list_shared_file_stays_allowed():
    """Two indices on one device file (MultipleFiles): allocating either allows it."""
    devs = [GpuDevice(0, "/d/a", "c", 195, 0), GpuDevice(1, "/d/a", "c", 195, 0),
            GpuDevice(2, "/d/b", "c", 195, 1)]
    assert deny_list(devs, [1]) == [["c", 195, 1]]


# ---- muster up: emulated GPUs as real device nodes ----------------------------------------

@root_only
def test_emulated_gpus_get_device_nodes(tmp_path):
    from muster.cli import muster
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    files = muster._emulated_gpu_files(str(state), ["node1", "node2"], 3)
    assert files == {n: f"{state}/dev/{n}/nvidia[0-2]" for n in ("node1", "node2")}
    for i in range(3):
        p = state / "dev" / "node2" / f"nvidia{i}"
        st = os.lstat(p)
        assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, i)
    # a second `muster up` keeps good nodes and replaces anything else at those paths
    bad = state / "dev" / "node1" / "nvidia1"
    bad.unlink()
    bad.write_text("not a device")
    assert muster._emulated_gpu_files(str(state), ["node1"], 3)["node1"].endswith("[0-2]")
    assert stat.S_ISCHR(os.lstat(bad).st_mode)


def test_no_mknod_keeps_count_lines(tmp_path, monkeypatch, capsys):
    """Without the right to mknod (not root) muster up says so and writes no File=."""
    from muster.cli import muster

    def refuse(*a, **k):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(muster.os, "mknod", refuse)
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    assert muster._emulated_gpu_files(str(state), ["node1"], 2) == {}
    err = capsys.readouterr().err
    assert "emulated GPUs get no device files" in err and "Operation not permitted" in err


@root_only
def test_render_and_load_round_trip_with_device_nodes(tmp_path):
    """The File= lines muster up writes load back to the indices and devices it made."""
    from muster.cli import muster
    from muster.config import render
    state = tmp_path / "s"
    state.mkdir(mode=0o755)
    files = muster._emulated_gpu_files(str(state), ["node1"], 8)
    node = {"NodeName": "node1", "CPUs": 4, "Gres": "gpu:8",
            "GresConf": [{"Name": "gpu", "File": files["node1"]}]}
    slurm_conf, gres_conf = render("c", [node], [{"PartitionName": "p", "Nodes": "node1"}], {})
    (state / "slurm.conf").write_text(slurm_conf)
    (state / "gres.conf").write_text(gres_conf)
    cfg = load(str(state / "slurm.conf"))
    devs = gpu_devices(cfg.nodes["node1"], cfg.gres_autodetect)
    assert [(d.index, d.major, d.minor) for d in devs] == [(i, 195, i) for i in range(8)]
    assert devs[3].path == f"{state}/dev/node1/nvidia3"


def test_gresfiles_is_stdlib_only():
    """The CLI side (muster up) imports it: no pynvml at import time."""
    import muster.config.gresfiles as g
    assert isinstance(g, types.ModuleType)
    src = Path(g.__file__).read_text()
    assert "\nimport pynvml" not in src and "\nfrom pynvml" not in src
