"""muster.common.auth: key files, minting and verifying HMAC credentials."""

import os
import stat

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


def test_mint_verify_roundtrip(key):
    cred = auth.mint(key, 1234, 567, host="login1")
    assert set(cred) == {"uid", "gid", "host", "ts", "nonce", "mac"}
    assert auth.Verifier(key).verify(cred) == (1234, 567)


def test_credential_is_json_safe(key):
    import json
    cred = json.loads(json.dumps(auth.mint(key, 0, 0)))
    assert auth.Verifier(key).verify(cred) == (0, 0)


def test_replay_refused(key):
    v = auth.Verifier(key)
    cred = auth.mint(key, 1000, 1000)
    assert v.verify(dict(cred)) == (1000, 1000)
    with pytest.raises(auth.CredentialError, match="replayed"):
        v.verify(dict(cred))
    # a fresh credential for the same user still works
    assert v.verify(auth.mint(key, 1000, 1000)) == (1000, 1000)


def test_refused_credential_does_not_burn_its_nonce(key):
    """A forged copy of a nonce must not lock the genuine credential out."""
    v = auth.Verifier(key)
    cred = auth.mint(key, 1000, 1000)
    forged = dict(cred, uid=0)
    with pytest.raises(auth.CredentialError, match="forged"):
        v.verify(forged)
    assert v.verify(cred) == (1000, 1000)


@pytest.mark.parametrize("field,value", [
    ("uid", 0), ("gid", 0), ("host", "elsewhere"), ("ts", None), ("nonce", "0" * 32),
])
def test_any_tampered_field_is_forged(key, field, value):
    cred = auth.mint(key, 1000, 1000, host="h")
    if field == "ts":
        value = cred["ts"] + 1
    cred[field] = value
    with pytest.raises(auth.CredentialError, match="forged"):
        auth.Verifier(key).verify(cred)


def test_wrong_key_is_forged(key):
    other = b"f" * 64
    with pytest.raises(auth.CredentialError, match="forged"):
        auth.Verifier(key).verify(auth.mint(other, 0, 0))


def test_bad_mac_hex_is_forged(key):
    cred = auth.mint(key, 0, 0)
    cred["mac"] = "0" * 64
    with pytest.raises(auth.CredentialError, match="forged"):
        auth.Verifier(key).verify(cred)


@pytest.mark.parametrize("skew", [-auth.TTL - 5, auth.TTL + 5, -10**6, 10**6])
def test_stale_or_future_refused(key, skew):
    t = 1_700_000_000
    cred = auth.mint(key, 1000, 1000, now=t + skew)
    with pytest.raises(auth.CredentialError, match="expired"):
        auth.Verifier(key).verify(cred, now=t)


@pytest.mark.parametrize("skew", [-auth.TTL, -1, 0, 1, auth.TTL])
def test_within_window_accepted(key, skew):
    t = 1_700_000_000
    cred = auth.mint(key, 1000, 1000, now=t + skew)
    assert auth.Verifier(key).verify(cred, now=t) == (1000, 1000)


def test_replay_remembered_while_valid_then_stale(key):
    t = 1_700_000_000
    v = auth.Verifier(key)
    cred = auth.mint(key, 5, 5, now=t)
    v.verify(dict(cred), now=t)
    with pytest.raises(auth.CredentialError, match="replayed"):
        v.verify(dict(cred), now=t + auth.TTL)
    with pytest.raises(auth.CredentialError, match="expired"):
        v.verify(dict(cred), now=t + auth.TTL + 1)


@pytest.mark.parametrize("cred", [
    None, "string", 5, [], {}, {"uid": 0},
    {"uid": "0", "gid": 0, "host": "", "ts": 0, "nonce": "a" * 32, "mac": "0" * 64},
    {"uid": True, "gid": 0, "host": "", "ts": 0, "nonce": "a" * 32, "mac": "0" * 64},
    {"uid": -1, "gid": 0, "host": "", "ts": 0, "nonce": "a" * 32, "mac": "0" * 64},
    {"uid": 2**40, "gid": 0, "host": "", "ts": 0, "nonce": "a" * 32, "mac": "0" * 64},
    {"uid": 0, "gid": 0, "host": "", "ts": 1.5, "nonce": "a" * 32, "mac": "0" * 64},
    {"uid": 0, "gid": 0, "host": "", "ts": 2**80, "nonce": "a" * 32, "mac": "0" * 64},
    {"uid": 0, "gid": 0, "host": ["x"], "ts": 0, "nonce": "a" * 32, "mac": "0" * 64},
    {"uid": 0, "gid": 0, "host": "", "ts": 0, "nonce": "", "mac": "0" * 64},
    {"uid": 0, "gid": 0, "host": "", "ts": 0, "nonce": "a" * 10**6, "mac": "0" * 64},
    {"uid": 0, "gid": 0, "host": "", "ts": 0, "nonce": "a" * 32, "mac": None},
    {"uid": 0, "gid": 0, "host": "", "ts": 0, "nonce": "a" * 32, "mac": "é" * 64},
    {"uid": 0, "gid": 0, "host": "", "ts": 0, "nonce": "a" * 32, "mac": "0" * 63},
    {"uid": 0, "gid": 0, "host": "\ud800", "ts": 0, "nonce": "a" * 32, "mac": "0" * 64},
], ids=lambda c: repr(c)[:40])
def test_malformed_credentials_raise_only_credential_error(key, cred):
    with pytest.raises(auth.CredentialError):
        auth.Verifier(key).verify(cred)


def test_many_credentials_do_not_grow_without_bound(key):
    v = auth.Verifier(key, ttl=10)
    t = 1_700_000_000
    for i in range(100_050):
        v._seen[f"{i:032x}"] = t - 100  # long expired
    v.verify(auth.mint(key, 1, 1, now=t), now=t)
    assert len(v._seen) < 100
