"""pycomm.peer_hosts: a failed gloo connection's peer address named as the host and ranks it is, from the
names this machine resolves (here loopback's, in every hosts file)."""

from __future__ import annotations

import socket

from pycomm import peer_hosts
from pycomm.peer_hosts import host_id


def test_an_address_in_the_error_names_its_host_and_ranks() -> None:
    name = socket.gethostbyaddr("127.0.0.1")[0]
    hosts = [host_id("elsewhere"), host_id(name), host_id(name)]
    text = "Read error [127.0.0.1]:8845: Connection reset by peer"
    assert peer_hosts.describe(text, hosts) == f" (the peer at 127.0.0.1 is {name}: ranks 1, 2)"


def test_nothing_is_added_without_an_address_or_a_rank_on_its_host() -> None:
    assert peer_hosts.describe("Connection reset by peer", [host_id("a")]) == ""
    assert peer_hosts.describe("Read error [127.0.0.1]:8845", [host_id("elsewhere")]) == ""
