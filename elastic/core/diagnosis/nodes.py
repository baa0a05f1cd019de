"""Node health across attempts: which node the next attempt runs without, and why. Pure.

A node is suspected on evidence tied to the node, not to the rank that happens to run there:

- its rank's failure says the node is at fault (a ``node``-class signature: an
  uncorrectable ECC error, a GPU fallen off the bus);
- the same failure twice in a row on it (:mod:`elastic.core.diagnosis.repeats`: then the
  node is suspected before the code is, and only a third identical failure, elsewhere,
  stops the run);
- the same failure again on it within :data:`SUSPICION_WINDOW_S` of an earlier one: on a
  different rank of it (two ranks, one node, one cause), or on the same rank (a repeat
  there). The same failure is the same signature, or the same signal (a SIGSEGV, a
  SIGBUS): an exit status alone says too little (two unrelated tracebacks both exit 1),
  and failures classed ``deterministic`` or ``symptom`` say nothing of the node (the
  code's fault, or another rank's).

Two unrelated failures of one rank (a W&B network error, hours later a NaN) are not
evidence: rank 0 does more than the others, wherever it runs. A suspected node is
excluded, for the rest of the run, when the usable nodes of the cluster left without it
(spares the attempt did not use included, as ``--preflight`` counts them) still meet
``--nnodes`` MIN; otherwise the run goes on with it and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from elastic.core.diagnosis.signatures import FailureClass
from elastic.core.failures import Failure, FailureKind
from elastic.core.labels import node_label, plural, signal_name

__all__ = ["SUSPICION_WINDOW_S", "NodeVerdict", "judge_node"]

# Ends that say nothing of the node's health: from outside, a node already gone, a command that never ran.
_NOT_THE_NODE = frozenset({FailureKind.TERMINATED, FailureKind.PREEMPTED, FailureKind.NODE_LOST,
                           FailureKind.LAUNCH_FAILED})
_NOT_THE_NODES_FAULT = frozenset({FailureClass.DETERMINISTIC, FailureClass.SYMPTOM})

# How far apart (seconds, the journal's clock) two failures on one node may be and still count
# together: a faulty part under the same load fails again soon, within a few restarts (minutes
# to an hour, a restart and a checkpoint load apart); failures further apart are the background
# rate of a large job (Llama 3's pre-training saw one interruption every three hours over 16k
# GPUs), which lands on any node by chance.
SUSPICION_WINDOW_S = 2 * 3600.0


@dataclass(frozen=True)
class NodeVerdict:
    """A suspected node: excluded from the next attempts, or kept (too few nodes left), and why."""

    node: str
    reason: str
    excluded: bool

    def fields(self) -> dict[str, object]:
        """As journaled in ``node_excluded`` or ``node_kept``."""
        return {"node": self.node, "reason": self.reason}


def _what(failure: Failure) -> str | None:
    """What makes two failures on one node the same: its signature, or the signal that crashed or
    killed it; ``None``: nothing that ties it to the node."""
    if failure.diagnosis is not None:
        return failure.diagnosis.signature
    if failure.kind in (FailureKind.CRASHED, FailureKind.KILLED) and failure.signal is not None:
        return signal_name(failure.signal)
    return None


def _why(cause: Failure, earlier: Sequence[Failure], identical: bool) -> str | None:
    if cause.kind in _NOT_THE_NODE:
        return None
    diagnosis = cause.diagnosis
    if diagnosis is not None and diagnosis.failure_class is FailureClass.NODE:
        return f"{diagnosis.signature}: the node is at fault ({diagnosis.line})"
    if diagnosis is not None and diagnosis.failure_class in _NOT_THE_NODES_FAULT:
        return None  # the code's fault, or another rank's
    if identical:
        return "the same failure twice in a row on it: the node is suspected before the code"
    what = _what(cause)
    if what is None:
        return None
    recent = [f for f in earlier if f.node == cause.node and f.kind not in _NOT_THE_NODE and _what(f) == what
              and cause.observed_at - f.observed_at <= SUSPICION_WINDOW_S]
    if not recent:
        return None
    last = recent[-1]
    apart = _apart(cause.observed_at - last.observed_at)
    if last.rank != cause.rank:
        return f"the same failure ({what}) on ranks {last.rank} and {cause.rank} of it, {apart}"
    return f"the same failure ({what}) on it again, attempts {last.attempt} and {cause.attempt}, {apart}"


def _apart(seconds: float) -> str:
    """``40 s apart``, ``12 min apart``."""
    return f"{seconds:.0f} s apart" if seconds < 120 else f"{seconds / 60:.0f} min apart"


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
    nodes already out; ``nodes``: the attempt's; ``available``: usable nodes of the cluster (the
    backend's count at the attempt's placement or the scale watch's later look: spares
    included, nodes already left out not; None: not known). A run that only ever had one
    node is never told so: there is nowhere else to go.
    """
    if cause.node in left_out:
        return None
    why = _why(cause, earlier, identical)
    usable = max(nodes, available or 0)
    if why is None or (usable <= 1 and cause.diagnosis is None):
        return None
    left = usable - 1
    if left >= min_nodes:
        return NodeVerdict(cause.node, why, True)
    return NodeVerdict(cause.node, f"{why}; kept: without node {node_label(cause.node)} "
                                   f"{plural(left, 'usable node')} would be left, --nnodes needs at least {min_nodes}",
                       False)
