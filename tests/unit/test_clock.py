"""muster.common.clock: the virtual clock moves only when told, its monotonic reading never
goes back, and an installed clock is what ``now()`` reads."""

from __future__ import annotations

import pytest

from muster.common import clock as clocks


def test_virtual_clock_moves_only_when_told():
    c = clocks.VirtualClock(1000)
    assert (c.time(), c.time()) == (1000, 1000)
    m0 = c.monotonic()
    c.advance(5)
    assert c.time() == 1005 and c.monotonic() == m0 + 5
    c.set(900)  # the wall clock stepped back: monotonic time does not
    assert c.time() == 900 and c.monotonic() == m0 + 5
    c.set(950)
    assert c.monotonic() == m0 + 55
    with pytest.raises(ValueError):
        c.advance(-1)


def test_installed_clock_is_what_now_reads():
    c = clocks.VirtualClock(1234.9)
    prev = clocks.install(c)
    try:
        assert clocks.now() == 1234 and clocks.time() == 1234.9
        c.advance(10)
        assert clocks.now() == 1244
        assert clocks.current() is c
    finally:
        clocks.install(prev)
    assert clocks.current() is prev
    assert clocks.RealClock().time() > 1.7e9  # the operating system's clock
