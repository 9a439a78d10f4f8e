"""The link handshake and frame sealing (muster.common.linkauth): pure functions."""

import pytest

from muster.common import linkauth as la

K = b"k" * 64
K2 = b"j" * 64


def _session(key_i=K, key_r=K, role="agent"):
    ni, nr = la.new_nonce(), la.new_nonce()
    proof_r = la.responder_proof(key_r, role, ni, nr)
    assert la.check(la.responder_proof(key_i, role, ni, nr), proof_r) == (key_i == key_r)
    return la.session_key(key_i, role, ni, nr), la.session_key(key_r, role, ni, nr)


def test_round_trip_both_directions():
    si, sr = _session()
    i_seal, i_open = la.pair(si, initiator=True)
    r_seal, r_open = la.pair(sr, initiator=False)
    for n in range(5):
        assert r_open.open(i_seal.seal(b"up %d" % n)) == b"up %d" % n
        assert i_open.open(r_seal.seal(b"down %d" % n)) == b"down %d" % n


def test_replayed_reordered_forged_injected_reflected_frames_fail():
    si, sr = _session()
    seal, _ = la.pair(si, initiator=True)
    a, b = seal.seal(b'{"op":"a"}'), seal.seal(b'{"op":"b"}')
    _, opener = la.pair(sr, initiator=False)
    with pytest.raises(la.LinkAuthError):
        opener.open(b)  # reordered: b before a
    _, opener = la.pair(sr, initiator=False)
    assert opener.open(a) == b'{"op":"a"}'
    with pytest.raises(la.LinkAuthError):
        opener.open(a)  # replayed
    _, opener = la.pair(sr, initiator=False)
    with pytest.raises(la.LinkAuthError):
        opener.open(a[:-1] + bytes([a[-1] ^ 1]))  # forged tag
    with pytest.raises(la.LinkAuthError):
        la.pair(sr, initiator=False)[1].open(b'{"op":"launch"}' + a[-la.TAG_BYTES:])  # injected
    with pytest.raises(la.LinkAuthError):
        la.pair(sr, initiator=True)[1].open(a)  # reflected back to its sender
    with pytest.raises(la.LinkAuthError):
        opener.open(b"short")


def test_proofs_bind_key_role_nonces_and_claims():
    ni, nr = la.new_nonce(), la.new_nonce()
    p = la.initiator_proof(K, "agent", ni, nr, {"uid": 0, "node": "n1"})
    assert la.check(p, la.initiator_proof(K, "agent", ni, nr, {"node": "n1", "uid": 0}))
    assert not la.check(p, la.initiator_proof(K2, "agent", ni, nr, {"uid": 0, "node": "n1"}))
    assert not la.check(p, la.initiator_proof(K, "client", ni, nr, {"uid": 0, "node": "n1"}))
    assert not la.check(p, la.initiator_proof(K, "agent", nr, ni, {"uid": 0, "node": "n1"}))
    assert not la.check(p, la.initiator_proof(K, "agent", ni, nr, {"uid": 1, "node": "n1"}))
    # a responder's proof is never an initiator's (no reflection)
    assert la.responder_proof(K, "agent", ni, nr) != la.initiator_proof(K, "agent", ni, nr, {})
    assert not la.check(p, None) and not la.check(p, 5) and not la.check(p, p[:-1])


def test_wrong_key_gives_a_different_session():
    si, sr = _session(K, K2)
    with pytest.raises(la.LinkAuthError):
        la.pair(sr, initiator=False)[1].open(la.pair(si, initiator=True)[0].seal(b"x"))


def test_key_choice_for_rotation():
    assert la.choose_key([K2, K], [la.key_id(K)]) == K
    assert la.choose_key([K, K2], [la.key_id(K2), la.key_id(K)]) == K
    assert la.choose_key([K], [la.key_id(K2)]) is None
    assert la.choose_key([K], "not a list") is None
    assert la.key_id(K) != la.key_id(K2) and len(la.key_id(K)) == 16


def test_nonce_validation():
    assert la.valid_nonce(la.new_nonce())
    assert la.new_nonce() != la.new_nonce()
    for bad in (None, 1, "", "g" * 32, "a" * 31, "A" * 32):
        assert not la.valid_nonce(bad)


# ---- the handshake state machines (Initiator, Responder) ------------------------------------

def _handshake(keys_i, keys_r, claims=None, role="agent"):
    i = la.Initiator(keys_i, role, claims or {"uid": 0, "gid": 0, "node": "n1"})
    r = la.Responder(keys_r, ("agent", "client"))
    auth = i.answer(r.challenge(i.hello()))
    return i, r, auth


def test_handshake_seals_both_ways_and_hello_reveals_nothing():
    i, r, auth = _handshake([K], [K])
    hello = la.Initiator([K], "agent", {"uid": 0}).hello()
    assert set(hello) == {"op", "v", "nonce", "role", "keys"} and hello["keys"] == [la.key_id(K)]
    assert r.verify(auth) == {"uid": 0, "gid": 0, "node": "n1"}
    i_seal, i_open = i.pair()
    r_seal, r_open = r.pair()
    assert r_open.open(i_seal.seal(b"reg")) == b"reg"
    assert i_open.open(r_seal.seal(b"ok")) == b"ok"


def test_impostor_responder_is_caught_before_the_initiator_proves_anything():
    i = la.Initiator([K], "agent", {"uid": 0})
    i.hello()
    for answer in ({"ok": True}, {"ok": True, "op": "launch"}, None, [],
                   {"ok": True, "op": "challenge", "nonce": la.new_nonce(),
                    "key": la.key_id(K), "proof": "0" * 64},
                   la.Responder([K2], ["agent"]).challenge(  # another key, our key's id
                       dict(i.hello(), keys=[la.key_id(K2)])) | {"key": la.key_id(K)}):
        with pytest.raises(la.LinkAuthError):
            i.answer(answer)
    assert i.session is None
    with pytest.raises(la.LinkAuthError, match="refused by the peer: Authentication failure"):
        i.answer(la.refusal("no cluster key in common"))


def test_responder_refuses_bad_hellos_and_proofs():
    r = la.Responder([K], ("agent",))
    for hello in (None, {"op": "hello"}, {"op": "hello", "v": 1, "nonce": "x", "role": "agent",
                                          "keys": [la.key_id(K)]},
                  la.Initiator([K], "client", {}).hello(),  # a role it does not serve
                  la.Initiator([K2], "agent", {}).hello()):  # no key in common
        with pytest.raises(la.LinkAuthError):
            la.Responder([K], ("agent",)).challenge(hello)
    with pytest.raises(la.LinkAuthError):
        r.verify({"op": "auth", "claims": {}, "proof": "0" * 64})  # no hello yet
    i, r, auth = _handshake([K], [K], {"uid": 1001, "gid": 1001})
    for bad in (dict(auth, claims={"uid": 0, "gid": 0}), dict(auth, proof=auth["proof"][::-1]),
                dict(auth, claims=[1]), None, [], {"op": "auth"}):
        with pytest.raises(la.LinkAuthError):
            r.verify(bad)


def test_rotation_handshake_uses_a_shared_key():
    i, r, auth = _handshake([K2, K], [K])  # the initiator has the new and the old key
    assert r.verify(auth) and r.key == K
    i, r, auth = _handshake([K], [K2, K])  # the responder has both
    assert r.verify(auth) and r.key == K


def test_hmac256_is_the_standard_hmac_sha256():
    """linkauth's HMAC (builtin SHA-256, precomputed pads: srun must not load OpenSSL) equals the
    standard library's for every key length around the block size, and RFC 4231's vectors."""
    import hashlib
    import hmac
    import os

    for n in (0, 1, 20, 32, 63, 64, 65, 131):
        key, msg = os.urandom(n), os.urandom(n * 3 + 1)
        assert la.Hmac256(key).digest(msg[:5], msg[5:]) == hmac.new(key, msg, hashlib.sha256).digest()
    # RFC 4231 test cases 1 and 6 (a key longer than the block)
    assert la.Hmac256(b"\x0b" * 20).digest(b"Hi There").hex() == (
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
    assert la.Hmac256(b"\xaa" * 131).digest(
        b"Test Using Larger Than Block-Size Key - Hash Key First").hex() == (
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")


def test_srun_does_not_load_openssl():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import sys, muster.cli.srun; "
                          "print('_hashlib' in sys.modules, 'hashlib' in sys.modules)"],
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
