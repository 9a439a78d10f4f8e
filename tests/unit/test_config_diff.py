"""muster.config.diff: what a reconfigure changes, and what it must refuse (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.common.errors import ConfigError
from muster.config import diff as cdiff
from muster.config import load
from muster.config.cgroupconf import load_cgroup_conf

BASE = """ClusterName=test
SlurmctldHost=ctl(127.0.0.1)
SlurmctldPort=7000
GresTypes=gpu
PriorityWeightAge=100
KillWait=30
NodeName=n[1-2] CPUs=8 RealMemory=8000 Gres=gpu:2
NodeName=n3 CPUs=4 RealMemory=4000 Weight=5
PartitionName=gpu Nodes=n[1-2] Default=YES MaxTime=60
PartitionName=small Nodes=n3 MaxTime=10
"""


def conf(tmp_path: Path, body: str, sub: str):
    d = tmp_path / sub
    d.mkdir()
    (d / "slurm.conf").write_text(body)
    return load(str(d / "slurm.conf"))


def test_same_file_is_no_change(tmp_path):
    d = cdiff.diff(conf(tmp_path, BASE, "a"), conf(tmp_path, BASE, "b"))
    assert d.changes == () and d.refused == ()


def test_nodes_partitions_and_settings(tmp_path):
    new = (BASE.replace("NodeName=n3 CPUs=4 RealMemory=4000 Weight=5\n",
                        "NodeName=n4 CPUs=2 RealMemory=2000\n")
           .replace("PartitionName=small Nodes=n3 MaxTime=10\n",
                    "PartitionName=tiny Nodes=n4 MaxTime=5\n")
           .replace("MaxTime=60", "MaxTime=30")
           .replace("PriorityWeightAge=100", "PriorityWeightAge=500")
           .replace("KillWait=30", "KillWait=5"))
    d = cdiff.diff(conf(tmp_path, BASE, "a"), conf(tmp_path, new, "b"))
    assert d.refused == ()
    assert d.names(cdiff.NODE_ADDED) == ["n4"]
    assert d.names(cdiff.NODE_REMOVED) == ["n3"]
    assert d.names(cdiff.PART_ADDED) == ["tiny"]
    assert d.names(cdiff.PART_REMOVED) == ["small"]
    assert d.names(cdiff.PART_CHANGED) == ["gpu"]
    (gpu,) = [c for c in d.changes if c.kind == cdiff.PART_CHANGED]
    assert "max_time=60->30" in gpu.detail
    settings = {c.name: c.detail for c in d.changes if c.kind == cdiff.SETTING}
    assert settings == {"PriorityWeightAge": "100->500", "KillWait": "30->5"}
    kinds = [c.kind for c in d.changes]  # applied in this order: nodes, partitions, settings
    assert kinds.index(cdiff.NODE_ADDED) < kinds.index(cdiff.PART_ADDED) < \
        kinds.index(cdiff.SETTING)


def test_node_live_fields_are_changes(tmp_path):
    new = BASE.replace("Weight=5", "Weight=9 Features=fast")
    d = cdiff.diff(conf(tmp_path, BASE, "a"), conf(tmp_path, new, "b"))
    assert d.refused == ()
    (c,) = d.changes
    assert (c.kind, c.name) == (cdiff.NODE_CHANGED, "n3")
    assert "Weight=5->9" in c.detail and "Features=(null)->fast" in c.detail


@pytest.mark.parametrize("old,new,needle", [
    ("SlurmctldPort=7000", "SlurmctldPort=7001", "SlurmctldPort"),
    ("ClusterName=test", "ClusterName=other", "ClusterName"),
    ("NodeName=n3 CPUs=4", "NodeName=n3 CPUs=6", "node n3: CPUs=4->6"),
    ("Gres=gpu:2", "Gres=gpu:4", "Gres=gpu:2->gpu:4"),
])
def test_restart_only_changes_are_refused(tmp_path, old, new, needle):
    d = cdiff.diff(conf(tmp_path, BASE, "a"), conf(tmp_path, BASE.replace(old, new), "b"))
    assert any(needle in r for r in d.refused), d.refused
    assert "StateSaveLocation" in cdiff.RESTART_KEYS


def test_added_state_save_location_is_refused(tmp_path):
    new = BASE + "StateSaveLocation=/var/spool/elsewhere\n"
    d = cdiff.diff(conf(tmp_path, BASE, "a"), conf(tmp_path, new, "b"))
    assert d.refused and "StateSaveLocation" in d.refused[0]


def test_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "c"
    bad.mkdir()
    (bad / "slurm.conf").write_text(BASE.replace("KillWait=30", "KillWait=soon"))
    with pytest.raises(ConfigError, match=r"slurm\.conf:6: .*KillWait"):
        load(str(bad / "slurm.conf"))
    (bad / "slurm.conf").write_text(BASE + "MaxJobCount=0\n")
    with pytest.raises(ConfigError, match=r"slurm\.conf:11: MaxJobCount=0"):
        load(str(bad / "slurm.conf"))
    (bad / "cgroup.conf").write_text("ConstrainCores=yes\nAllowedRAMSpace=lots\n")
    with pytest.raises(ConfigError, match=r"cgroup\.conf:2: AllowedRAMSpace"):
        load_cgroup_conf(str(bad / "slurm.conf"))
    (bad / "slurm.conf").write_text(BASE)
    (bad / "gres.conf").write_text("NodeName=n1 Name=gpu Count=2\nNodeName=n2 Name=gpx\n")
    with pytest.raises(ConfigError, match=r"gres\.conf:2: "):
        load(str(bad / "slurm.conf"))
