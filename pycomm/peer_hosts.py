"""Which node a broken connection led to: gloo names a failed peer by its address only ("Read error
[10.1.2.3]:4521: Connection reset by peer"); a job spread over nodes wants the node's name and its ranks,
as mpirun names a lost rank's node. Looked up only when an op has failed, in the host names the machine
knows (its hosts file, or its resolver)."""

from __future__ import annotations

import hashlib
import re
import socket
from typing import Optional, Sequence

_ADDRESS = re.compile(r"\[([0-9A-Fa-f.:]+)\]:\d+")


def host_id(name: Optional[str] = None) -> int:
    """This host (or the host named `name`), as an int64 that equal host names share on every rank
    (split_by_node, local ranks)."""
    name = socket.gethostname() if name is None else name
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=7).digest(), "little")


def _names(address: str) -> set[str]:
    try:
        name, aliases, _ = socket.gethostbyaddr(address)
    except (OSError, UnicodeError):
        return set()
    names = {name, *aliases}
    return names | {n.split(".", 1)[0] for n in names}  # a resolver's FQDN, a rank's short host name


def describe(text: str, hosts: Sequence[int]) -> str:
    """ " (the peer at ADDRESS is HOST: ranks R, ...)" for each address in `text` whose name is the host of
    some ranks (`hosts`: a host id per rank, as host_id gives it); "" when none is."""
    found = []
    for address in dict.fromkeys(_ADDRESS.findall(text)):
        for name in sorted(_names(address)):
            ranks = [r for r, h in enumerate(hosts) if h == host_id(name)]
            if ranks:
                found.append(
                    f"the peer at {address} is {name}: rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
                )
                break
    return f" ({'; '.join(found)})" if found else ""
