"""What a node reads of a rank that exited 0: whether a stop signal from outside had reached it.

The rank bootstrap's ``ELASTIC_SIGNALS_FILE`` (a stop handler that ran, JAX's
preemption sync point), else a framework's stop line near the end of its log;
and whether the rank said it finished. The judgement is
:mod:`elastic.core.rank_ends`' and :func:`elastic.core.failures.classify`'s;
this module only reads files, each a bounded read, at the rank's exit.
"""

from __future__ import annotations

from elastic.core.launch.spec import WorkerSpec
from elastic.core.rank_ends import StopSign, stop_sign_in, stop_sign_in_lines
from elastic.node.logs.tail import read_log_tail
from elastic.worker.bootstrap.rank_signals import SIGNALS_FILE_VAR
from elastic.worker.heartbeat import HEARTBEAT_FILE_VAR, declared_done

__all__ = ["STOP_TAIL_BYTES", "STOP_TAIL_LINES", "said_done", "stop_sign"]

# How far back a framework's stop line is looked for when the signals file says nothing:
# MaxText logs its shutdown (goodput, metrics) for a few dozen lines after it.
STOP_TAIL_LINES = 200
STOP_TAIL_BYTES = 64 * 1024
_MAX_SIGNALS_READ = 64 * 1024


def stop_sign(spec: WorkerSpec) -> StopSign | None:
    """What showed that a stop signal from outside reached this rank, which exited 0: its
    signals file (the rank bootstrap's), else a framework's stop line near the end of its log."""
    path = spec.env.get(SIGNALS_FILE_VAR)
    if path:
        try:
            with open(path, "rb") as signals:
                text = signals.read(_MAX_SIGNALS_READ).decode("utf-8", errors="replace")
        except OSError:
            text = ""
        found = stop_sign_in(text)
        if found is not None:
            return found
    return stop_sign_in_lines(read_log_tail(spec.log_path, STOP_TAIL_LINES, STOP_TAIL_BYTES))


def said_done(spec: WorkerSpec) -> bool:
    """Whether the rank said it finished (``elastic.heartbeat(done=True)``)."""
    heartbeat = spec.env.get(HEARTBEAT_FILE_VAR, "")
    return bool(heartbeat) and declared_done(heartbeat)
