"""Node health across attempts: which node the next attempt runs without, and why. Pure.

A node is suspected when its rank's failure says the node is at fault (a ``node``-class
signature: an uncorrectable ECC error, a GPU fallen off the bus), when its ranks were the
root cause on two attempts (any class but ``deterministic``: the same code fails the same
way anywhere), or when the same failure happened twice in a row on it
(:mod:`elastic.core.diagnosis.repeats`: then the node is suspected before the code is, and
only a third identical failure, elsewhere, stops the run). A suspected node is excluded,
for the rest of the run, when the nodes left still meet ``--nnodes`` MIN (spares included);
otherwise the run goes on with it and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from elastic.core.diagnosis.signatures import FailureClass
from elastic.core.failures import Failure, FailureKind
from elastic.core.labels import node_label, plural

__all__ = ["NodeVerdict", "judge_node"]

# Ends that say nothing of the node's health: from outside, a node already gone, a command that never ran.
_NOT_THE_NODE = frozenset({FailureKind.TERMINATED, FailureKind.PREEMPTED, FailureKind.NODE_LOST,
                           FailureKind.LAUNCH_FAILED})
LEMON_ROOT_CAUSES = 2  # root causes on one node, over the run, that make it suspect


@dataclass(frozen=True)
class NodeVerdict:
    """A suspected node: excluded from the next attempts, or kept (too few nodes left), and why."""

    node: str
    reason: str
    excluded: bool

    def fields(self) -> dict[str, object]:
        """As journaled in ``node_excluded`` or ``node_kept``."""
        return {"node": self.node, "reason": self.reason}


def _why(cause: Failure, earlier: Sequence[Failure], identical: bool) -> str | None:
    if cause.kind in _NOT_THE_NODE:
        return None
    diagnosis = cause.diagnosis
    if diagnosis is not None and diagnosis.failure_class is FailureClass.NODE:
        return f"{diagnosis.signature}: the node is at fault ({diagnosis.line})"
    if diagnosis is not None and diagnosis.failure_class in (FailureClass.DETERMINISTIC, FailureClass.SYMPTOM):
        return None  # the code's fault, or another rank's
    if identical:
        return "the same failure twice in a row on it: the node is suspected before the code"
    times = 1 + sum(1 for f in earlier if f.node == cause.node and f.kind not in _NOT_THE_NODE and not (
        f.diagnosis and f.diagnosis.failure_class in (FailureClass.DETERMINISTIC, FailureClass.SYMPTOM)))
    if times >= LEMON_ROOT_CAUSES:
        return f"its ranks were the root cause on {times} attempts"
    return None


def judge_node(
    cause: Failure,
    earlier: Sequence[Failure],
    *,
    identical: bool,
    left_out: Sequence[str],
    nodes: int,
    available: int | None,
    min_nodes: int,
) -> NodeVerdict | None:
    """Whether ``cause``'s node is suspected, and excluded or kept; ``None`` when it is not suspected.

    ``earlier``: the root causes of the run's earlier attempts; ``identical``: ``cause`` repeats
    the attempt before's (:func:`elastic.core.diagnosis.repeats.identical_again`); ``left_out``:
    nodes already out; ``nodes``: the attempt's; ``available``: usable nodes at the scale
    watch's last look (None: not known). A run that only ever had one node is never told so:
    there is nowhere else to go.
    """
    if cause.node in left_out:
        return None
    why = _why(cause, earlier, identical)
    usable = max(nodes, available or 0)
    if why is None or (usable <= 1 and cause.diagnosis is None):
        return None
    left = usable - len(set(left_out)) - 1
    if left >= min_nodes:
        return NodeVerdict(cause.node, why, True)
    return NodeVerdict(cause.node, f"{why}; kept: without node {node_label(cause.node)} "
                                   f"{plural(left, 'usable node')} would be left, --nnodes needs at least {min_nodes}",
                       False)
