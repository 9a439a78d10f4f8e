"""The step I/O stream's framing and sealing (muster.common.iostream): pure logic."""

import os

import pytest

from muster.common import iostream as io
from muster.common import linkauth as la

K = os.urandom(32)


def _sealed_pair():
    """(daemon's sealer, srun's decoder) after a real handshake on K."""
    ini = la.Initiator([K], io.ROLE, {"node": "n1"})
    resp = la.Responder([K], (io.ROLE,))
    ini.answer(resp.challenge(ini.hello()))
    dec = io.Decoder()
    dec.opener = resp.pair()[1]
    return ini.pair()[0], dec


def test_frames_split_anywhere_and_switch_to_sealed_mid_buffer():
    sealer, dec_after = _sealed_pair()
    dec = io.Decoder()
    stream = io.hello({"op": "auth"}) + io.seal(sealer, io.STDOUT, 3, b"x" * 70000) \
        + io.seal(sealer, io.DONE, 0, b"{}")
    got = []
    for i in range(0, len(stream), 997):  # odd chunks: heads and tags split across feeds
        dec.feed(stream[i:i + 997])
        for f in dec.frames():
            got.append(f)
            if f[0] == io.HELLO:  # the handshake's last message: sealed from the next byte
                dec.opener, dec.limit = dec_after.opener, io.MAX_PAYLOAD
    assert got == [(io.HELLO, 0, b'{"op":"auth"}'), (io.STDOUT, 3, b"x" * 70000),
                   (io.DONE, 0, b"{}")]


@pytest.mark.parametrize("attack", ["forged", "replayed", "reordered", "injected", "retyped"])
def test_a_bad_sealed_frame_ends_the_stream_before_it_is_yielded(attack):
    sealer, dec = _sealed_pair()
    a = io.seal(sealer, io.STDOUT, 0, b"first\n")
    b = io.seal(sealer, io.STDOUT, 0, b"second\n")
    p = io.HEAD.size
    bad = {"forged": a[:p] + b"F" + a[p + 1:], "replayed": a + a, "reordered": b,
           "injected": io.pack(io.STDOUT, 0, b"evil\n") + os.urandom(io.TAG),
           "retyped": bytes([io.STDERR]) + a[1:]}[attack]
    dec.feed(bad + b"trailing bytes after the bad frame")
    got = []
    with pytest.raises(la.LinkAuthError):  # not a BufferError from a view left alive
        for f in dec.frames():
            got.append(f)
    assert got == ([(io.STDOUT, 0, b"first\n")] if attack == "replayed" else [])


def test_pre_auth_frames_are_capped_and_typed():
    dec = io.Decoder()
    dec.feed(io.HEAD.pack(io.HELLO, 0, la.PRE_AUTH_MAX_FRAME + 1))
    with pytest.raises(io.FrameError):
        list(dec.frames())
    dec = io.Decoder()
    dec.feed(io.HEAD.pack(99, 0, 0))
    with pytest.raises(io.FrameError):
        list(dec.frames())
    for bad in (b"[1]", b"not json", b"\xff"):
        with pytest.raises(io.FrameError):
            io.message(bad)


def test_next_frame_leaves_the_rest_buffered():
    dec = io.Decoder()
    dec.feed(io.hello({"a": 1}) + io.hello({"b": 2})[:5])
    assert dec.next_frame() == (io.HELLO, 0, b'{"a":1}')
    assert dec.next_frame() is None
    dec.feed(io.hello({"b": 2})[5:])
    assert dec.next_frame() == (io.HELLO, 0, b'{"b":2}')


def test_step_key():
    assert io.step_key("ab" * 32) == bytes([0xAB]) * 32
    for bad in (None, 5, "ab" * 8, "zz" * 32):
        with pytest.raises(ValueError):
            io.step_key(bad)


def test_winsize_frames_are_sealed_and_checked():
    """srun --pty's WINSIZE: a frame kind the decoder accepts (sealed like every other) and a
    payload that is exactly two 16-bit sizes, clamped when built."""
    sealer, dec = _sealed_pair()
    dec.feed(io.seal(sealer, io.WINSIZE, 0, io.winsize(40, 120)))
    [(kind, _, payload)] = list(dec.frames())
    assert kind == io.WINSIZE and io.winsize_of(payload) == (40, 120)
    assert io.winsize_of(io.winsize(-1, 1 << 20)) == (0, 0xFFFF)
    for bad in (b"", b"\x00\x01\x02", b"\x00" * 5):
        with pytest.raises(io.FrameError):
            io.winsize_of(bad)
    dec = io.Decoder()
    dec.feed(io.HEAD.pack(io.LAST_KIND + 1, 0, 0))
    with pytest.raises(io.FrameError):
        list(dec.frames())
