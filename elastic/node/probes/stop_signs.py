"""What a node reads of a rank that ended: its own account of its end, and whether a stop signal
from outside had reached it.

The rank bootstrap's ``ELASTIC_SIGNALS_FILE`` (each stop handler that ran and when, JAX's
preemption sync point, the exception ``sys.excepthook`` was handed), read into
:class:`elastic.core.evidence.RankAccount` at every exit; for an exit 0, the stop it shows, else
a framework's stop line near the end of its log; and whether the rank said it finished. The
judgement is :mod:`elastic.core.rank_ends`' and :func:`elastic.core.failures.classify`'s; this
module only reads files, each a bounded read, at the rank's exit.
"""

from __future__ import annotations

import os
import time

from elastic.core.evidence import RankAccount, read_account
from elastic.core.launch.spec import WorkerSpec
from elastic.core.rank_ends import StopSign, stop_sign_in, stop_sign_in_lines
from elastic.node.logs.tail import read_log_tail
from elastic.worker.bootstrap.rank_signals import SIGNALS_FILE_VAR
from elastic.worker.heartbeat import HEARTBEAT_FILE_VAR, declared_done

__all__ = ["STOP_TAIL_BYTES", "STOP_TAIL_LINES", "account", "read_signals_file", "said_done", "stop_sign"]

# How far back a framework's stop line is looked for when the signals file says nothing:
# MaxText logs its shutdown (goodput, metrics) for a few dozen lines after it.
STOP_TAIL_LINES = 200
STOP_TAIL_BYTES = 64 * 1024
# The end of the signals file that is read: the latest catches are what a stop is judged by.
_MAX_SIGNALS_READ = 64 * 1024


def account(spec: WorkerSpec, pid: int | None = None, *, now: float | None = None) -> RankAccount | None:
    """What the rank bootstrap wrote of this rank (None: nothing, or no file to read), its ages
    counted to ``now`` (the node's wall clock, the one the rank stamped it with; None: the moment
    it is read); ``pid``: the rank's process, the only one whose uncaught exception is the rank's."""
    return read_signals_file(spec.env.get(SIGNALS_FILE_VAR), pid, now=now)


def read_signals_file(path: str | None, pid: int | None = None, *, now: float | None = None) -> RankAccount | None:
    """The account in a rank's signals file (its last 64 KiB: the latest catches are what a stop is
    judged by), its ages counted to ``now`` (None: the moment it is read); None when there is no
    file to read."""
    if not path:
        return None
    try:
        with open(path, "rb") as signals:
            size = os.fstat(signals.fileno()).st_size
            signals.seek(max(0, size - _MAX_SIGNALS_READ))
            text = signals.read(_MAX_SIGNALS_READ).decode("utf-8", errors="replace")
    except OSError:
        return None
    return read_account(text, now=time.time() if now is None else now, pid=pid)


def stop_sign(spec: WorkerSpec, seen: RankAccount | None) -> StopSign | None:
    """What showed that a stop signal from outside reached this rank, which exited 0: its
    account (``seen``, :func:`account`'s), else a framework's stop line near the end of its log."""
    if seen is not None:
        found = stop_sign_in(seen)
        if found is not None:
            return found
    return stop_sign_in_lines(read_log_tail(spec.log_path, STOP_TAIL_LINES, STOP_TAIL_BYTES))


def said_done(spec: WorkerSpec) -> bool:
    """Whether the rank said it finished (``elastic.heartbeat(done=True)``)."""
    heartbeat = spec.env.get(HEARTBEAT_FILE_VAR, "")
    return bool(heartbeat) and declared_done(heartbeat)
