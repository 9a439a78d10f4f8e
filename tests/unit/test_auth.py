"""muster.common.auth: key files (mode, owner, rotation) and job credentials."""

import os
import stat
import time

import pytest

from muster.common import auth


@pytest.fixture
def keyfile(tmp_path):
    path = str(tmp_path / "muster.key")
    auth.generate_key(path)
    return path


@pytest.fixture
def key(keyfile):
    return auth.load_key(keyfile)


def test_generated_key_is_0600_and_loads(keyfile):
    assert stat.S_IMODE(os.stat(keyfile).st_mode) == 0o600
    key = auth.load_key(keyfile)
    assert len(key) >= 64  # hex of 32 random bytes


def test_generate_refuses_to_overwrite(keyfile):
    with pytest.raises(FileExistsError):
        auth.generate_key(keyfile)


def test_two_keys_differ(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    auth.generate_key(a)
    auth.generate_key(b)
    assert auth.load_key(a) != auth.load_key(b)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606, 0o620])
def test_key_readable_or_writable_by_others_is_refused(keyfile, mode):
    os.chmod(keyfile, mode)
    with pytest.raises(auth.CredentialError, match="0600"):
        auth.load_key(keyfile)


def test_key_file_checks(tmp_path):
    short = tmp_path / "short"
    short.write_text("abc\n")
    os.chmod(short, 0o600)
    with pytest.raises(auth.CredentialError, match="too short"):
        auth.load_key(str(short))
    with pytest.raises(auth.CredentialError):
        auth.load_key(str(tmp_path / "missing"))
    d = tmp_path / "dir"
    d.mkdir(mode=0o700)
    with pytest.raises(auth.CredentialError):
        auth.load_key(str(d))


def test_key_symlink_is_refused(keyfile, tmp_path):
    link = tmp_path / "link"
    os.symlink(keyfile, link)
    with pytest.raises(auth.CredentialError):
        auth.load_key(str(link))


def test_key_owned_by_another_user_is_refused(keyfile):
    if os.geteuid() != 0:
        pytest.skip("needs root to give the key away")
    os.chown(keyfile, 1001, -1)  # any uid that is neither ours nor root's
    with pytest.raises(auth.CredentialError, match=r"must be owned by uid 0 or root "
                                                   r"\(it is owned by uid 1001\)"):
        auth.load_key(keyfile)
    os.chown(keyfile, 0, 1001)  # another group owning it is fine while the mode is 0600
    assert auth.load_key(keyfile)


def test_error_is_one_line(keyfile):
    os.chmod(keyfile, 0o640)
    with pytest.raises(auth.CredentialError) as exc:
        auth.load_key(keyfile)
    assert "\n" not in str(exc.value) and keyfile in str(exc.value)


def test_load_keys_adds_the_old_key_of_a_rotation(keyfile):
    assert auth.load_keys(keyfile) == [auth.load_key(keyfile)]
    auth.generate_key(keyfile + ".old")
    new, old = auth.load_keys(keyfile)
    assert new == auth.load_key(keyfile) and old == auth.load_key(keyfile + ".old")
    os.chmod(keyfile + ".old", 0o644)  # the old key is checked like the new one
    with pytest.raises(auth.CredentialError, match=r"\.old: key file must be mode 0600"):
        auth.load_keys(keyfile)


# ---- job credentials ------------------------------------------------------------------------

LAUNCH = {"op": "launch", "job_id": 7, "run": 1, "uid": 1001, "gid": 1001, "groups": [1001],
          "script": "#!/bin/sh\n"}


def _signed(key, msg, node="node1", uid=1001, gid=1001, now=None):
    return dict(msg, cred=auth.mint_job_cred(auth.cred_key(key), msg, node, uid, gid, now))


def test_job_cred_roundtrip_and_json_safe(key):
    import json
    msg = json.loads(json.dumps(_signed(key, LAUNCH)))
    auth.verify_job_cred([auth.cred_key(key)], msg, "node1", (1001, 1001))
    # the cred key is derived: the cluster key itself does not verify it
    with pytest.raises(auth.CredentialError, match="forged"):
        auth.verify_job_cred([key], msg, "node1", (1001, 1001))


@pytest.mark.parametrize("change", [
    {"op": "launch_step"}, {"job_id": 8}, {"run": 2}, {"step_id": 0}, {"groups": [0]},
    {"uid": 0}])
def test_job_cred_covers_op_job_run_step_groups(key, change):
    msg = dict(_signed(key, LAUNCH), **change)
    with pytest.raises(auth.CredentialError):
        auth.verify_job_cred([auth.cred_key(key)], msg, "node1", (msg["uid"], msg["gid"]))


def test_job_cred_refusals(key):
    ck = [auth.cred_key(key)]
    with pytest.raises(auth.CredentialError, match="expired"):
        auth.verify_job_cred(ck, _signed(key, LAUNCH, now=time.time() - auth.CRED_TTL - 5),
                             "node1", (1001, 1001))
    with pytest.raises(auth.CredentialError, match="for node 'node2', not 'node1'"):
        auth.verify_job_cred(ck, _signed(key, LAUNCH, node="node2"), "node1", (1001, 1001))
    with pytest.raises(auth.CredentialError, match="uid/gid 0/0, the job runs as 1001/1001"):
        auth.verify_job_cred(ck, _signed(key, LAUNCH, uid=0, gid=0), "node1", (1001, 1001))
    forged = _signed(key, LAUNCH)
    forged["cred"]["node"] = "node2"
    with pytest.raises(auth.CredentialError, match="forged"):
        auth.verify_job_cred(ck, forged, "node2", (1001, 1001))
    with pytest.raises(auth.CredentialError, match="forged"):
        auth.verify_job_cred(ck, _signed(b"z" * 64, LAUNCH), "node1", (1001, 1001))


def test_job_cred_of_either_rotation_key_is_accepted(key):
    old = b"o" * 64
    ck = [auth.cred_key(key), auth.cred_key(old)]
    auth.verify_job_cred(ck, _signed(old, LAUNCH), "node1", (1001, 1001))


def test_kill_list_cred_covers_the_list(key):
    msg = _signed(key, {"op": "kill_list", "jobs": [3, 4]}, uid=None, gid=None)
    auth.verify_job_cred([auth.cred_key(key)], msg, "node1")
    with pytest.raises(auth.CredentialError, match="forged"):
        auth.verify_job_cred([auth.cred_key(key)], dict(msg, jobs=[3, 4, 5]), "node1")


_OK = {"node": "node1", "uid": 0, "gid": 0, "exp": 1, "mac": "0" * 64}


@pytest.mark.parametrize("cred", [None, "x", 5, [], {}, {"node": "node1"}, dict(_OK, uid=-1),
                                  dict(_OK, exp=True), dict(_OK, mac="é" * 64),
                                  dict(_OK, node=1), dict(_OK, gid="0")])
def test_malformed_job_creds_raise_only_credential_error(key, cred):
    with pytest.raises(auth.CredentialError):
        auth.verify_job_cred([auth.cred_key(key)], dict(LAUNCH, cred=cred), "node1", (1001, 1001))
