"""``--preflight``: a node's health checked before an attempt's ranks start, and what follows. Pure.

Before each attempt's ranks start, the driver has every node of the plan run the
preflight command (with the environment of the node's first rank, ``ELASTIC_NODE``
set, under ``--preflight-timeout``) and hands back a :class:`NodeCommandResult` per
node. :func:`judge_preflight` decides: a node whose command did not exit 0 (a non-zero
exit, a signal, the timeout, a command that could not run, a node out of reach) is
excluded for the rest of the run, as a node at fault is
(:mod:`elastic.core.diagnosis.nodes`); the attempt is planned again without it when
the nodes left, spares included, still meet ``--nnodes`` MIN, and otherwise the run
fails before anything is launched, in one line naming the preflight and the node's
output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from elastic.core.labels import node_label, plural, signal_name

__all__ = ["OUTPUT_LINES", "NodeCommand", "NodeCommandResult", "PreflightVerdict", "judge_preflight"]

OUTPUT_LINES = 10  # of a preflight's output, the last lines kept (journal, summary)
_LINE_CHARS = 300  # a line longer than this is cut (the one-line message holds one)


@dataclass(frozen=True)
class NodeCommand:
    """A command for one node to run: its argv, environment and folder."""

    node: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str | None = None


@dataclass(frozen=True)
class NodeCommandResult:
    """How a node's command ended: its exit code or signal, or the timeout, or why it could not
    run (``error``: not found, not executable, its node out of reach); its last output lines."""

    node: str
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    error: str | None = None
    output: tuple[str, ...] = ()
    duration_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.error is None

    def how(self, timeout_s: float) -> str:
        """``exit code 3``, ``killed by SIGKILL``, ``timed out after 60s, --preflight-timeout``."""
        if self.error is not None:
            return f"could not run: {self.error}"
        if self.timed_out:
            return f"timed out after {timeout_s:g}s, --preflight-timeout"
        if self.signal is not None:
            return f"killed by {signal_name(self.signal)}"
        return f"exit code {self.exit_code}"

    def last_line(self) -> str | None:
        """Its last non-blank output line, cut to a readable length."""
        for line in reversed(self.output):
            if line.strip():
                text = line.strip()
                return text if len(text) <= _LINE_CHARS else text[:_LINE_CHARS] + "..."
        return None

    def fields(self) -> dict[str, object]:
        """As journaled in ``preflight_ran``'s ``results``."""
        return {
            "node": self.node, "passed": self.passed, "exit_code": self.exit_code,
            "signal": None if self.signal is None else signal_name(self.signal),
            "timed_out": self.timed_out, "error": self.error, "output": list(self.output),
            "duration_s": round(self.duration_s, 3),
        }


@dataclass(frozen=True)
class PreflightVerdict:
    """The nodes a preflight excludes (node, reason), and whether the run goes on; when it
    cannot, ``message``: the one line the run fails with."""

    excluded: tuple[tuple[str, str], ...]
    goes_on: bool
    message: str | None = None


def _reason(result: NodeCommandResult, timeout_s: float) -> str:
    said = result.last_line()
    return f"--preflight failed ({result.how(timeout_s)})" + (f": {said}" if said else ": no output")


def judge_preflight(
    results: Sequence[NodeCommandResult],
    *,
    timeout_s: float,
    available: int,
    min_nodes: int,
) -> PreflightVerdict:
    """What the preflight of an attempt's nodes means: which are excluded, and whether the
    attempt can be planned again without them.

    ``available``: usable nodes the backend saw when the preflight ran (nodes already left
    out not counted), spares beyond the attempt's included.
    """
    failed = [r for r in results if not r.passed]
    if not failed:
        return PreflightVerdict((), True)
    excluded = tuple((r.node, _reason(r, timeout_s)) for r in failed)
    left = max(len(results), available) - len({r.node for r in failed})
    if left >= min_nodes:
        return PreflightVerdict(excluded, True)
    first = failed[0]
    said = first.last_line()
    others = f" (and on {plural(len(failed) - 1, 'other node')})" if len(failed) > 1 else ""
    message = (f"--preflight failed on node {node_label(first.node)}{others} ({first.how(timeout_s)})"
               f"{f': {said}' if said else ', no output'}; "
               f"{plural(max(left, 0), 'usable node')} left, --nnodes needs at least {min_nodes}")
    return PreflightVerdict(excluded, False, message)
