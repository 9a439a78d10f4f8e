"""Pure parts of container support: oci.conf and its % patterns, the pyxis mount spec and
option rules (common.containerspec), the runtime config, and the image cache's size limit."""

from __future__ import annotations

import fcntl
import os
import tarfile

import pytest

from muster.agent import imagecache, oci, userns
from muster.common import containerspec as cs
from muster.common.errors import ConfigError
from muster.config import ociconf


def test_oci_conf_defaults_to_rootless_runc_run():
    conf = ociconf.parse_oci_conf("")
    assert conf.run == ociconf.DEFAULT_RUN and conf.create is None
    assert conf.create_env_file == "disabled" and conf.cache_mb == 20480


def test_oci_conf_keys_quotes_and_comments():
    conf = ociconf.parse_oci_conf(
        '# comment\nRunTimeQuery="runc --rootless=true state %n.%j"  # trailing\n'
        'runtimecreate="runc create --bundle %b %n.%j"\nRunTimeStart="runc start %n.%j"\n'
        'RunTimeEnvExclude="^(SLURM_CONF|SLURM_CONF_SERVER)="\nMountSpoolDir=/var/run/slurm\n'
        'CreateEnvFile=true MusterImageCacheMB=64\nDisableHooks=nvidia\n')
    assert conf.run is None and conf.create == "runc create --bundle %b %n.%j"
    assert conf.query == "runc --rootless=true state %n.%j"
    assert conf.env_exclude == "^(SLURM_CONF|SLURM_CONF_SERVER)="
    assert conf.mount_spool_dir == "/var/run/slurm" and conf.create_env_file == "null"
    assert conf.cache_mb == 64 and conf.extra == {"disablehooks": "nvidia"}


@pytest.mark.parametrize("text, msg", [
    ('RunTimeRun="a"\nRunTimeCreate="b"\nRunTimeStart="c"', "cannot be combined"),
    ('RunTimeCreate="b"', "both required"),
    ("Bogus=1", "unknown key 'bogus'"),
    ("RunTimeEnvExclude=(", "invalid RunTimeEnvExclude"),
    ("MountSpoolDir=rel", "absolute"),
    ("CreateEnvFile=maybe", "invalid CreateEnvFile"),
    ("MusterImageCacheMB=0", "invalid MusterImageCacheMB"),
])
def test_oci_conf_errors_name_file_and_line(text, msg):
    with pytest.raises(ConfigError) as ei:
        ociconf.parse_oci_conf(text, "/etc/oci.conf")
    assert msg in str(ei.value) and str(ei.value).startswith("/etc/oci.conf")


def test_load_finds_the_file_next_to_slurm_conf(tmp_path):
    assert ociconf.load_oci_conf(str(tmp_path / "slurm.conf")).path is None  # none: defaults
    (tmp_path / "oci.conf").write_text('RunTimeRun="crun run %b"\n')
    conf = ociconf.load_oci_conf(str(tmp_path / "slurm.conf"))
    assert conf.run == "crun run %b" and conf.path == str(tmp_path / "oci.conf")


def test_patterns_expand_and_quote_every_value():
    values = {"b": "/x y/bundle", "j": 7, "n": "node1", "s": 0, "t": 3, "u": "al'ice", "U": 1001,
              "m": "/spool", "r": "/x y/rootfs", "e": "/spool/env", "p": 42}
    got = ociconf.expand("rt --root=%m run -b %b %n.%u.%j.%s.%t %U %p %e %r 100%% %z -- %@",
                         values, ["sh", "-c", "echo $HOME; rm -rf /"])
    assert got == ("rt --root=/spool run -b '/x y/bundle' node1.'al'\"'\"'ice'.7.0.3 1001 42 "
                   "/spool/env '/x y/rootfs' 100% %z -- sh -c 'echo $HOME; rm -rf /'")


def test_mount_spec_parses_pyxis_forms():
    assert cs.parse_mounts("/a,/b:/c,/d:/e:ro,/f:/g:ro+nosuid,/h::rw") == [
        ["/a", "/a", ""], ["/b", "/c", ""], ["/d", "/e", "ro"], ["/f", "/g", "ro+nosuid"],
        ["/h", "/h", "rw"]]


@pytest.mark.parametrize("spec", ["rel:/x", "/a:rel", "/a:/b/../../etc", "/a:/b:exec-as-root"])
def test_mount_spec_refuses_bad_entries(spec):
    with pytest.raises(cs.ContainerSpecError):
        cs.parse_mounts(spec)


def test_options_make_one_request_and_refuse_bad_combinations():
    assert cs.from_options({}) is None
    assert cs.from_options({"container": "/b"}) == {"bundle": "/b"}
    spec = cs.from_options({"container_image": "docker://ubuntu", "container_writable": True,
                            "container_env": "PATH,HOME", "container_remap_root": True})
    assert spec == {"image": "docker://ubuntu", "writable": True, "env": ["PATH", "HOME"],
                    "mount_home": False, "remap_root": True}
    assert cs.decode(cs.encode(spec)) == spec
    for bad in ({"container": "/b", "container_image": "/i"}, {"container_workdir": "/w"},
                {"container_image": "/i", "container_writable": True,
                 "container_readonly": True},
                {"container_name": "../x"}, {"container_image": "/i", "container_env": "A-B"},
                {"container_image": "/i", "container_workdir": "rel"}):
        with pytest.raises(cs.ContainerSpecError):
            cs.from_options(bad)
    for bad in ("{", "[]", '{"mounts": []}', '{"image": "/i", "mounts": [["rel", "/x", ""]]}'):
        with pytest.raises(cs.ContainerSpecError):
            cs.decode(bad)


def test_runtime_config_maps_only_the_user_and_keeps_the_task_cgroup():
    base = {"ociVersion": "1.0.2", "process": {"args": ["x"], "user": {"uid": 5}},
            "linux": {"cgroupsPath": "/elsewhere", "resources": {"memory": {"limit": 1}},
                      "namespaces": [{"type": "network"}, {"type": "pid"}, {"type": "user"}]},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}]}
    cfg = oci.build_config(base, rootfs="/r", readonly=True, argv=["sh", "-c", "true"],
                           env={"A": "1"}, cwd="/w", mounts=[{"destination": "/m"}], uid=1003,
                           gid=1004, keep_base=True)
    assert cfg["process"]["user"] == {"uid": 0, "gid": 0}
    assert cfg["process"]["args"] == ["sh", "-c", "true"] and cfg["process"]["env"] == ["A=1"]
    assert cfg["linux"]["uidMappings"] == [{"containerID": 0, "hostID": 1003, "size": 1}]
    assert cfg["linux"]["gidMappings"] == [{"containerID": 0, "hostID": 1004, "size": 1}]
    assert "cgroupsPath" not in cfg["linux"] and "resources" not in cfg["linux"]
    assert cfg["linux"]["namespaces"] == [{"type": "pid"}, {"type": "user"}]
    assert [m["destination"] for m in cfg["mounts"]] == ["/proc", "/m"]
    assert base["linux"]["cgroupsPath"] == "/elsewhere"  # the bundle's config is not changed


def test_image_env_wins_except_for_container_env_names():
    env = oci.merged_env({"PATH": "/host", "HOME": "/h", "A": "a"}, ["PATH=/img", "HOME=/root"],
                         ["HOME"])
    assert env == {"PATH": "/img", "HOME": "/h", "A": "a"}


def _tarball(path, payload: int) -> str:
    root = path.parent / (path.name + ".d")
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "blob").write_bytes(os.urandom(payload))
    with tarfile.open(path, "w") as tf:
        tf.add(root, arcname=".")
    return str(path)


def test_cache_unpacks_once_and_reuses(tmp_path):
    cache = imagecache.ImageCache(str(tmp_path / "cache"), 1 << 30)
    img = _tarball(tmp_path / "a.tar", 4096)
    entry, fd = cache.acquire(img)
    assert os.path.isfile(os.path.join(entry, "rootfs", "bin", "blob"))
    os.close(fd)
    stamp = os.stat(os.path.join(entry, "rootfs")).st_ino
    again, fd = cache.acquire(img)
    os.close(fd)
    assert again == entry and os.stat(os.path.join(again, "rootfs")).st_ino == stamp


def test_cache_evicts_least_recently_used_but_never_an_image_in_use(tmp_path):
    cache = imagecache.ImageCache(str(tmp_path / "cache"), 300 << 10)
    a, b, c = (_tarball(tmp_path / f"{n}.tar", 200 << 10) for n in "abc")
    ea, fa = cache.acquire(a)           # kept in use
    eb, fb = cache.acquire(b)           # over the limit, but a is pinned: both stay
    os.close(fb)
    assert os.path.isdir(ea) and os.path.isdir(eb)
    ec, fc = cache.acquire(c)           # b is the only unused one: it goes
    assert os.path.isdir(ea) and os.path.isdir(ec) and not os.path.exists(eb)
    os.close(fa)
    os.close(fc)
    cache.evict()                       # nothing pinned: least recently used first (a)
    assert not os.path.exists(ea) and os.path.isdir(ec)


def test_cache_waits_for_an_unpack_in_progress(tmp_path):
    """An exclusive lock (another task unpacking) makes acquire wait: the lock is the share."""
    cache = imagecache.ImageCache(str(tmp_path / "cache"), 1 << 30)
    img = _tarball(tmp_path / "a.tar", 1024)
    lock = os.path.join(cache.root, cache.key(img) + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    pid = os.fork()
    if pid == 0:
        try:
            entry, _ = cache.acquire(img)
            os._exit(0 if os.path.isdir(entry) else 3)
        except BaseException:
            os._exit(4)
    try:
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)  # blocked behind our lock
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_cache_reports_a_missing_or_bad_image(tmp_path):
    cache = imagecache.ImageCache(str(tmp_path / "cache"), 1 << 30)
    with pytest.raises(imagecache.CacheError, match="No such file"):
        cache.acquire(str(tmp_path / "none.tar"))
    (tmp_path / "junk.tar").write_bytes(b"not a tar")
    with pytest.raises(imagecache.CacheError, match="not an image file"):
        cache.acquire(str(tmp_path / "junk.tar"))
    (tmp_path / "dir").mkdir()
    with pytest.raises(imagecache.CacheError, match="OCI image layout"):
        cache.acquire(str(tmp_path / "dir"))
    assert [n for n in os.listdir(cache.root) if n.startswith(".unpack")] == []


def test_own_ids_run_the_task_as_the_user_with_container_root_on_a_subordinate_id():
    """With muster.agent.userns's outer namespace: the task is the user's uid and gid inside,
    mapped to themselves; container root is outer 0 (the first subordinate id)."""
    cfg = oci.build_config({}, rootfs="/r", readonly=True, argv=["id"], env={}, cwd="/",
                           mounts=[], uid=1003, gid=1004, keep_base=False, own_ids=True)
    assert cfg["process"]["user"] == {"uid": 1003, "gid": 1004}
    assert cfg["linux"]["uidMappings"] == [{"containerID": 0, "hostID": 0, "size": 1},
                                           {"containerID": 1003, "hostID": 1003, "size": 1}]
    assert cfg["linux"]["gidMappings"] == [{"containerID": 0, "hostID": 0, "size": 1},
                                           {"containerID": 1004, "hostID": 1004, "size": 1}]


def test_subordinate_ids_by_name_or_uid_and_only_a_non_empty_range(tmp_path):
    f = tmp_path / "subuid"
    f.write_text("alice:100000:65536\n1003:231072:65536\nbob:5:0\nbroken\n")
    assert userns.subordinate(str(f), "alice", 1001) == 100000
    assert userns.subordinate(str(f), "carol", 1003) == 231072
    assert userns.subordinate(str(f), "bob", 1002) is None
    assert userns.subordinate(str(tmp_path / "missing"), "alice", 1001) is None


def _gpu_cfg():
    return {"process": {"env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"]},
            "mounts": [{"destination": "/dev/nvidia0", "source": "/dev/nvidia0"},
                       {"destination": "/dev/nvidiactl", "source": "/dev/nvidiactl"},
                       {"destination": "/data", "source": "/data"}]}


def test_gpus_through_the_nvidia_hook_when_installed():
    cfg = oci.add_gpus(_gpu_cfg(), {"SLURM_STEP_GPUS": "1,3"},
                       "/usr/bin/nvidia-container-runtime-hook")
    assert cfg["hooks"]["prestart"] == [{
        "path": "/usr/bin/nvidia-container-runtime-hook",
        "args": ["nvidia-container-runtime-hook", "prestart"], "env": [f"PATH={oci.DEFAULT_PATH}"]}]
    env = cfg["process"]["env"]
    assert "NVIDIA_VISIBLE_DEVICES=1,3" in env and "NVIDIA_VISIBLE_DEVICES=all" not in env
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env
    assert [m["destination"] for m in cfg["mounts"]] == ["/data"]  # the hook mounts devices


def test_gpus_by_bound_device_files_without_the_hook_or_without_gpus():
    for env, hook in (({"SLURM_JOB_GPUS": "0"}, None),
                      ({}, "/usr/bin/nvidia-container-runtime-hook")):
        cfg = oci.add_gpus(_gpu_cfg(), env, hook)
        assert "hooks" not in cfg and len(cfg["mounts"]) == 3, (env, hook)
        assert cfg["process"]["env"] == ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"]


def test_cleanup_removes_the_jobs_named_containers_and_trims_the_cache(tmp_path):
    home = tmp_path / f"muster-oci-{os.getuid()}"
    for job in ("7", "8"):
        named = home / "jobs" / f"node1.{job}" / "c" / "rootfs" / "ro"
        named.mkdir(parents=True)
        named.chmod(0o500)  # an image may ship a directory without its owner's write bit
    cache = imagecache.ImageCache(str(home / "images"), 1 << 30)
    for n in "ab":
        _, fd = cache.acquire(_tarball(tmp_path / f"{n}.tar", 600 << 10))
        os.close(fd)
    (tmp_path / "oci.conf").write_text("MusterImageCacheMB=1\n")
    oci.cleanup_job(str(tmp_path), "node1", "7", base=str(tmp_path))
    assert sorted(os.listdir(home / "jobs")) == ["node1.8"]
    assert len(cache.entries()) == 1  # 1.2 MB of images, 1 MB allowed: the older one went


# ---- the launch report channel (runner -> its root parent) ----------------------------------

def test_launch_report_gives_the_runners_reason_only_for_its_failure_status():
    """Read once, after the task ended with the runner's status 1 and no signal; anything
    else (0, another code, a signal) is no launch failure, whatever the pipe holds."""
    for exit_code, sig, want in ((1, 0, "container: bad image"), (0, 0, None), (2, 0, None),
                                 (0, 9, None)):
        rep = oci.LaunchReport()
        env = rep.env({"PATH": "/bin", oci.REPORT_ENV: "0"})  # a user's value is replaced
        assert env[oci.REPORT_ENV] == str(rep.w) and rep.fds == (rep.w,)
        os.write(rep.w, b"container: bad image\n")
        w = rep.w
        rep.started()
        assert rep.fds == () and not _is_open(w)
        assert rep.reason(exit_code, sig) == want
        assert not _is_open(rep.r)


def test_launch_report_is_bounded_one_printable_line_and_never_blocks():
    rep = oci.LaunchReport()
    os.write(rep.w, b"container: a\x1b[2Jb\n" + b"x" * 4000)
    text = rep.reason(1, 0)
    assert text is not None and text.startswith("container: a [2Jb x")
    assert len(text) <= oci.REPORT_MAX and text.isprintable()
    empty = oci.LaunchReport()
    empty.started()
    assert empty.reason(1, 0) is None  # nothing written: no wait, no reason


def test_the_runner_takes_its_end_out_of_the_environment(monkeypatch):
    """The container never sees the variable, and the descriptor is close-on-exec so no
    runtime command inherits it; a value that names no open descriptor is no channel."""
    r, w = os.pipe()
    os.set_inheritable(w, True)
    monkeypatch.setenv(oci.REPORT_ENV, str(w))
    try:
        assert oci._take_report_fd() == w
        assert oci.REPORT_ENV not in os.environ and not os.get_inheritable(w)
        oci._report(w, "container: why")
        assert os.read(r, 100) == b"container: why"
    finally:
        os.close(r)
        os.close(w)
    for bad in ("999999", "-1", "x", ""):
        monkeypatch.setenv(oci.REPORT_ENV, bad)
        assert oci._take_report_fd() is None and oci.REPORT_ENV not in os.environ


def test_the_runners_failure_is_reported_on_the_channel(monkeypatch, capsys):
    """main() with a request it cannot run: one stderr line, status 1, and the same
    reason on the channel its parent reads."""
    rep = oci.LaunchReport()
    monkeypatch.setenv(oci.REPORT_ENV, str(rep.w))
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    os.set_inheritable(rep.w, True)
    assert oci.main(["--conf", "", "--"]) == 1
    assert capsys.readouterr().err == "slurmstepd-n1: error: container: no command\n"
    assert rep.reason(1, 0) == "container: no command"


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_enroot_environment_lines(tmp_path):
    """/etc/environment of an enroot image: KEY=VALUE lines, `export` and one level of quotes
    allowed, the rest skipped."""
    from muster.agent.imagecache import _enroot_environment
    p = tmp_path / "environment"
    p.write_text("# comment\nexport A=1\nB=\"two words\"\nC='x'\n 9BAD=1\nno equals\n"
                 "D-E=1\nE=\nF=a=b\n")
    assert _enroot_environment(str(p)) == ["A=1", "B=two words", "C=x", "E=", "F=a=b"]
    assert _enroot_environment(str(tmp_path / "missing")) == []
