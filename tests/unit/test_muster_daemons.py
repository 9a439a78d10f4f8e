"""muster.cli.muster_daemons' small decisions: which nodes an agent started on this host can
serve (is_local: a real bind, no stand-in), and where musterrestd listens (its command line
read as the daemon reads it)."""

from __future__ import annotations

import socket

import pytest

from muster.cli import muster_daemons as md


@pytest.mark.parametrize("addr", ["127.0.1.7", "127.0.0.1", "localhost"])
def test_loopback_nodes_are_this_hosts(addr):
    assert md.is_local(addr, "some-other-host")


def test_this_hostname_is_this_host_whatever_the_address():
    assert md.is_local("192.0.2.1", socket.gethostname())


@pytest.mark.parametrize("addr", ["192.0.2.1", "no-such-node.invalid", ""])
def test_foreign_or_unresolvable_addresses_are_not(addr):
    # 192.0.2.0/24 is TEST-NET-1: never an address of a real interface
    assert not md.is_local(addr, "no-such-host.invalid")


@pytest.mark.parametrize("argv,want", [
    (["musterrestd", "-f", "c", "--listen", "127.0.0.1:4242"], ("127.0.0.1", 4242)),
    (["musterrestd", "--listen=0.0.0.0:80"], ("0.0.0.0", 80)),
    (["musterrestd", "--listen", ":9000"], ("127.0.0.1", 9000)),  # loopback, as the daemon
    (["musterrestd", "-f", "c"], ("127.0.0.1", 6820)),            # its default
    (["musterrestd", "--listen", "host:port"], None),             # it would refuse to start
    ([], None),                                                    # the process is gone
])
def test_restd_address_from_its_command_line(argv, want):
    assert md._listen_of(argv) == want
