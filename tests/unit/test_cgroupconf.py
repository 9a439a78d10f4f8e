"""cgroup.conf parsing: Slurm's defaults, key forms, accepted-and-ignored keys, bad lines."""

import pytest

from muster.common.errors import ConfigError
from muster.config.cgroupconf import CgroupConf, load_cgroup_conf, parse_cgroup_conf


def test_missing_file_gives_slurm_defaults(tmp_path):
    conf = load_cgroup_conf(str(tmp_path))
    assert conf == CgroupConf()
    assert conf.path is None
    assert conf.cgroup_plugin == "autodetect"
    assert conf.cgroup_mountpoint == "/sys/fs/cgroup"
    assert (conf.constrain_cores, conf.constrain_ram_space, conf.constrain_swap_space,
            conf.constrain_devices) == (False, False, False, False)
    assert (conf.allowed_ram_space, conf.allowed_swap_space) == (100.0, 0.0)
    assert (conf.max_ram_percent, conf.max_swap_percent) == (100.0, 100.0)
    assert conf.min_ram_space == 30
    assert conf.memory_swappiness is None
    assert conf.enabled


def test_full_file_parses_case_insensitively_with_comments(tmp_path):
    (tmp_path / "cgroup.conf").write_text(
        "# site cgroup settings\n"
        "CgroupPlugin=cgroup/v2\n"
        "cgroupmountpoint=/sys/fs/cgroup/\n"
        "ConstrainCores=yes  ConstrainRAMSpace=YES   # two on a line\n"
        "CONSTRAINSWAPSPACE=true\n"
        "ConstrainDevices=yes\n"
        "\n"
        "AllowedRAMSpace=95.5\n"
        "AllowedSwapSpace=10%\n"
        "MaxRAMPercent=90\nMaxSwapPercent=50\nMinRAMSpace=64\nMemorySwappiness=0\n"
        "IgnoreSystemd=yes\nIgnoreSystemdOnFailure=no\n"
    )
    conf = load_cgroup_conf(str(tmp_path / "slurm.conf"))  # the slurm.conf path works too
    assert conf.path == str(tmp_path / "cgroup.conf")
    assert conf.cgroup_plugin == "cgroup/v2"
    assert conf.cgroup_mountpoint == "/sys/fs/cgroup"
    assert conf.constrain_cores and conf.constrain_ram_space and conf.constrain_swap_space
    assert conf.constrain_devices
    assert conf.allowed_ram_space == 95.5 and conf.allowed_swap_space == 10.0
    assert (conf.max_ram_percent, conf.max_swap_percent, conf.min_ram_space) == (90, 50, 64)
    assert conf.memory_swappiness == 0
    assert conf.ignore_systemd and not conf.ignore_systemd_on_failure


def test_cgroup_conf_path_itself_and_directory_both_resolve(tmp_path):
    (tmp_path / "cgroup.conf").write_text("ConstrainCores=yes\n")
    assert load_cgroup_conf(str(tmp_path / "cgroup.conf")).constrain_cores
    assert load_cgroup_conf(str(tmp_path)).constrain_cores


def test_disabled_plugin():
    conf = parse_cgroup_conf("CgroupPlugin=disabled\n")
    assert not conf.enabled


def test_obsolete_and_later_release_keys_are_accepted_and_ignored():
    conf = parse_cgroup_conf(
        "CgroupAutomount=yes\nConstrainKmemSpace=no\nAllowedKmemSpace=100\n"
        "CgroupReleaseAgentDir=/etc/slurm/cgroup\nEnableControllers=yes\n")
    assert conf == CgroupConf(path="cgroup.conf")


@pytest.mark.parametrize("line, needle", [
    ("ConstrainCorez=yes", "unknown cgroup.conf parameter 'ConstrainCorez'"),
    ("ConstrainCores=maybe", "ConstrainCores=maybe: expected yes or no"),
    ("CgroupPlugin=cgroup/v3", "CgroupPlugin=cgroup/v3: expected one of"),
    ("AllowedRAMSpace=lots", "AllowedRAMSpace=lots: expected a percentage"),
    ("AllowedRAMSpace=-5", "AllowedRAMSpace=-5: expected a percentage"),
    ("MinRAMSpace=3.5", "MinRAMSpace=3.5: expected a number of MB"),
    ("MemorySwappiness=101", "MemorySwappiness=101: expected 0..100"),
    ("CgroupMountpoint=relative/dir", "expected an absolute path"),
    ("ConstrainCores", "expected Key=Value"),
    ("ConstrainCores=", "expected Key=Value"),
])
def test_bad_lines_name_file_and_line(tmp_path, line, needle):
    path = tmp_path / "cgroup.conf"
    path.write_text("# header\nConstrainCores=yes\n" + line + "\n")
    with pytest.raises(ConfigError) as info:
        load_cgroup_conf(str(tmp_path))
    msg = str(info.value)
    assert msg.startswith(f"{path}:3: "), msg
    assert needle in msg, msg


def test_unreadable_path_is_a_config_error(tmp_path):
    (tmp_path / "cgroup.conf").mkdir()  # a directory where the file should be
    with pytest.raises(ConfigError, match="cgroup.conf: cannot read"):
        load_cgroup_conf(str(tmp_path))


def test_muster_favor_dynmods_is_musters_own_key_default_yes():
    assert CgroupConf().muster_favor_dynmods is True
    assert parse_cgroup_conf("MusterFavorDynMods=no\n").muster_favor_dynmods is False
    assert parse_cgroup_conf("musterfavordynmods=yes\n").muster_favor_dynmods is True
    with pytest.raises(ConfigError, match=r"cgroup.conf:1: MusterFavorDynMods=maybe"):
        parse_cgroup_conf("MusterFavorDynMods=maybe\n")
