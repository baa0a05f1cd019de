"""The words every layer shows for signals, nodes and ranks: one spelling each. Pure.

A signal is journaled and shown by name (``SIGTERM``) and decided by number; a node
by the launcher's name for it (:func:`name_nodes`: its host name, with a short node id
where two nodes share a host), a bare Ray node id (a journal written before nodes had
names) cut for people; a set of
ranks as ``rank 1`` / ``ranks 1, 3`` in sentences and as ``0-3, 6`` in tables; a count
with its noun (``1 worker``, ``2 workers``).
The summary, ``elastic status``, ``report.json``, the timeline and the logs all
go through here, so one thing reads the same everywhere.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping

__all__ = [
    "NAME_ID_DIGITS",
    "NAME_SEPARATOR",
    "name_nodes",
    "node_label",
    "plural",
    "rank_list",
    "rank_ranges",
    "short_node",
    "signal_name",
    "signal_number",
    "without_own_prefix",
]

NAME_SEPARATOR = "·"  # between a shared host's name and the node id's first digits: ``gpu-3·a1b2c3``
NAME_ID_DIGITS = 6  # of the node id, after a shared host's name (more only to stay unique)


def signal_name(signum: int) -> str:
    """``SIGKILL`` for 9; ``SIG<n>`` for numbers Python has no name for."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def signal_number(name: str) -> int | None:
    """9 for ``SIGKILL``, ``KILL`` or ``kill``; ``None`` for a name that is no signal's."""
    upper = name.upper()
    try:
        return int(signal.Signals[upper if upper.startswith("SIG") else "SIG" + upper])
    except KeyError:
        return None


def name_nodes(named: Mapping[str, str], hosts: Mapping[str, str]) -> dict[str, str]:
    """Names for the nodes of ``hosts`` (node id -> host name) not yet in ``named`` (node
    id -> the name it was given): the new names only.

    A node is named by its host; where another node of the run (named before, or new
    here) has the same host, by the host, :data:`NAME_SEPARATOR` and the first
    :data:`NAME_ID_DIGITS` of its id (more where those would not be unique), as on a
    test cluster whose raylets all run on one machine. A name once given is kept: the
    first node of a host keeps the bare host name when a second one joins later. A node
    with no host name known is named by its id. Names are unique among ``named`` and
    the new ones.
    """
    host_of = {node: name.split(NAME_SEPARATOR, 1)[0] for node, name in named.items()}
    new = {node: host or node for node, host in hosts.items() if node not in named}
    counts: dict[str, int] = {}
    for host in [*host_of.values(), *new.values()]:
        counts[host] = counts.get(host, 0) + 1
    taken = set(named.values())
    names: dict[str, str] = {}
    for host in sorted(set(new.values())):
        nodes = sorted(node for node, its_host in new.items() if its_host == host)
        if counts[host] == 1 and host not in taken:
            names[nodes[0]] = host
            taken.add(host)
            continue
        digits = NAME_ID_DIGITS  # one length for a host's new nodes: none reads as another's prefix
        while digits < max(map(len, nodes)) and (
            len({node[:digits] for node in nodes}) < len(nodes)
            or any(f"{host}{NAME_SEPARATOR}{node[:digits]}" in taken for node in nodes)
        ):
            digits += 2
        for node in nodes:
            name = f"{host}{NAME_SEPARATOR}{node[:digits]}"
            names[node] = node if name in taken or host == node else name  # else the id alone
            taken.add(names[node])
    return names


def node_label(node: str) -> str:
    """A node as people read it: its name as :func:`name_nodes` gave it, whole; a bare
    Ray node id (56 hex digits, in a journal written before nodes had names) cut to its
    first 12.

    Every place that shows a node to a person (summary, status, report) goes through
    here, so one node reads the same in all.
    """
    if len(node) > 16 and all(c in "0123456789abcdefABCDEF" for c in node):
        return node[:12]
    return node


def short_node(node: str) -> str:
    """A lane's label: the node's label, a host name without its domain; at most 18 characters,
    the short id after a shared host's name kept whole."""
    host, separator, suffix = node_label(node).partition(NAME_SEPARATOR)
    if not host.replace(".", "").isdigit():  # an IP address stays whole
        host = host.split(".", 1)[0] or host
    room = 18 - len(separator) - len(suffix)
    if len(host) > room:
        host = host[: max(1, room - 1)] + "…"
    return host + separator + suffix


def rank_list(ranks: Iterable[int]) -> str:
    """``rank 1`` or ``ranks 1, 3``: for a sentence."""
    numbers = sorted(set(ranks))
    return ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(map(str, numbers))


def without_own_prefix(rank: object, line: str) -> str:
    """A line of rank ``rank``'s output without the prefix it put there itself: torch's
    ``[rank1]: `` (its excepthook's, once the process group is up), which the launcher's
    ``[rank 1]`` stands in for. A prefix naming another rank is the line's own and is kept."""
    own = f"[rank{rank}]:"
    if not line.startswith(own):
        return line
    rest = line[len(own):]
    return rest[1:] if rest.startswith(" ") else rest


def rank_ranges(ranks: Iterable[int]) -> str:
    """``0-3, 6``: sorted ranks with runs joined, for a table's cell."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 rank``, ``2 ranks``, ``0 ranks``: a count with its noun, in a sentence."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"
