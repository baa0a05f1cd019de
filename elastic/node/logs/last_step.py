"""The last training step an attempt's rank logs show, and when they were last written."""

from __future__ import annotations

from pathlib import Path

from elastic.core.training.output_steps import StepReader, compile_user_pattern
from elastic.core.training.stall import ProgressPolicy
from elastic.node.logs.tail import read_log_tail

__all__ = ["last_step_logged"]

_LINES = 200  # of each log's end: a step line is among them unless the rank printed a flood after it


def last_step_logged(attempt_dir: Path, policy: ProgressPolicy) -> tuple[int, float] | None:
    """The highest step the last lines of ``attempt_dir``'s rank logs show (read as the node reads
    steps, ``--progress-pattern`` included), and the last change of the log that shows it (epoch
    seconds); None when no log there shows one, or output is not read for steps.

    For the driver that takes a dead driver's run over: the ranks went on printing steps after
    the dead driver last journaled one.
    """
    if not policy.read_output:
        return None
    reader = StepReader() if policy.pattern is None else StepReader.with_user_pattern(compile_user_pattern(policy.pattern))
    best: tuple[int, float] | None = None
    for log in sorted(attempt_dir.glob("rank-*.log")):
        try:
            written = log.stat().st_mtime
        except OSError:
            continue
        lines = read_log_tail(log, lines=_LINES)
        step = next((s for line in reversed(lines) if (s := reader.step(line)) is not None), None)
        if step is not None and (best is None or step > best[0]):
            best = (step, written)
    return best
