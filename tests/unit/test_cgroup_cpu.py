"""V1Hierarchy.usage's CPU arithmetic on a cpuacct directory's files: the total is always
cpuacct.usage (the scheduler's runtime), split in the ratio of the tick samples."""

import pytest

from muster.agent.cgroup import V1Hierarchy


def usage_of(tmp_path, usage_ns: int, user_ns: int | None, sys_ns: int | None) -> dict:
    d = tmp_path / "job"
    d.mkdir()
    (d / "cpuacct.usage").write_text(f"{usage_ns}\n")
    if user_ns is not None:
        (d / "cpuacct.usage_user").write_text(f"{user_ns}\n")
    if sys_ns is not None:
        (d / "cpuacct.usage_sys").write_text(f"{sys_ns}\n")
    return V1Hierarchy({"cpuacct": str(tmp_path)}).usage("job")


@pytest.mark.parametrize("user_ns, sys_ns, want", [
    # the samples ran ahead of the runtime (interrupts served while the job was current)
    (1_800_000_000, 600_000_000, (1_500_000, 500_000)),
    # they lost most of it (a busy loop on a busy host)
    (300_000_000, 100_000_000, (1_500_000, 500_000)),
    # they agree: kept as they are
    (1_200_000_000, 800_000_000, (1_200_000, 800_000)),
    # no tick at all: all of it user time
    (0, 0, (2_000_000, 0)),
])
def test_the_total_is_cpuacct_usage_split_by_the_samples(tmp_path, user_ns, sys_ns, want):
    use = usage_of(tmp_path, 2_000_000_000, user_ns, sys_ns)
    assert (use["cpu_user_us"], use["cpu_sys_us"]) == want


def test_a_kernel_without_the_per_mode_files_still_gives_the_total(tmp_path):
    use = usage_of(tmp_path, 2_000_000_000, None, None)
    assert (use["cpu_user_us"], use["cpu_sys_us"]) == (2_000_000, 0)
    assert use["mem_peak"] is None and use["mem_cur"] is None
