"""The words every layer shows for signals, nodes and ranks: one spelling each. Pure.

A signal is journaled and shown by name (``SIGTERM``) and decided by number; a node
by the launcher's name for it, cut for people where it is a Ray node id; a set of
ranks as ``rank 1`` / ``ranks 1, 3`` in sentences and as ``0-3, 6`` in tables; a count
with its noun (``1 worker``, ``2 workers``).
The summary, ``elastic status``, ``report.json``, the timeline and the logs all
go through here, so one thing reads the same everywhere.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable

__all__ = ["node_label", "plural", "rank_list", "rank_ranges", "short_node", "signal_name", "signal_number"]


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


def node_label(node: str) -> str:
    """A node as people read it: a Ray node id (56 hex digits) cut to its first 12.

    Host names and addresses stay whole. Every place that shows a node to a person
    (summary, status, report) goes through here, so one node reads the same in all.
    """
    if len(node) > 16 and all(c in "0123456789abcdefABCDEF" for c in node):
        return node[:12]
    return node


def short_node(node: str) -> str:
    """A lane's label: the node's label, a host name without its domain; at most 18 characters."""
    node = node_label(node)
    if not node.replace(".", "").isdigit():  # an IP address stays whole
        node = node.split(".", 1)[0] or node
    return node if len(node) <= 18 else node[:17] + "…"


def rank_list(ranks: Iterable[int]) -> str:
    """``rank 1`` or ``ranks 1, 3``: for a sentence."""
    numbers = sorted(set(ranks))
    return ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(map(str, numbers))


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
