"""Property tests: compress round-trips any host sequence; expand respects MAX_HOSTS."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muster.common.errors import InputError
from muster.common.hostlist import MAX_HOSTS, compress, compress_sorted, expand

prefixes = st.sampled_from(["n", "node", "gpu", "rack1-n", "a1b", "x-", ""])
numbers = st.integers(min_value=0, max_value=1200)
widths = st.integers(min_value=0, max_value=5)
suffixes = st.sampled_from(["", "", "", "-ib", "a"])


@st.composite
def hostnames(draw):
    prefix = draw(prefixes)
    num = draw(numbers)
    width = draw(widths)
    suffix = draw(suffixes)
    digits = str(num).zfill(width)
    name = f"{prefix}{digits}{suffix}"
    return name or "login"


@settings(max_examples=300, deadline=None)
@given(st.lists(hostnames(), max_size=40))
def test_compress_roundtrip(hosts):
    assert expand(compress(hosts)) == hosts


@settings(max_examples=300, deadline=None)
@given(st.lists(hostnames(), max_size=40))
def test_compress_sorted_is_permutation(hosts):
    assert sorted(expand(compress_sorted(hosts))) == sorted(hosts)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["n", "gpu"]), max_size=1), st.integers(0, 60), st.integers(1, 60))
def test_consecutive_run_compresses_to_one_range(p, lo, count):
    prefix = p[0] if p else "n"
    hosts = [f"{prefix}{i}" for i in range(lo, lo + count)]
    text = compress(hosts)
    assert text.count(",") == 0
    assert expand(text) == hosts


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10**9), st.integers(0, 10**9)), min_size=1, max_size=3
    )
)
def test_expand_never_exceeds_limit(bounds):
    groups = "".join(f"[{min(a, b)}-{max(a, b)}]" for a, b in bounds)
    expr = f"n{groups}"
    size = 1
    for a, b in bounds:
        size *= abs(a - b) + 1
    if size > MAX_HOSTS:
        with pytest.raises(InputError):
            expand(expr)
    else:
        hosts = expand(expr)
        assert len(hosts) == size <= MAX_HOSTS


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="n0123456789[]-, x", max_size=30))
def test_expand_garbage_is_list_or_inputerror(expr):
    try:
        hosts = expand(expr)
    except InputError:
        return
    assert isinstance(hosts, list) and len(hosts) <= MAX_HOSTS
