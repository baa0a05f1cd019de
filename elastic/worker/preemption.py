"""Preemption notices as a rank sees them (standard library only).

When the launcher gets a preemption notice (SIGUSR1 to ``elastic run``, or a Ray
node drained with a deadline), the node agent writes a small JSON file at the
path in ``ELASTIC_PREEMPTION_FILE`` (atomically: a temporary file renamed), and
only then sends the rank ``--preempt-signal`` (SIGTERM by default). So a rank
whose framework catches the signal itself (Lightning, Orbax, NeMo) and a
hand-written loop read the same truth: :func:`preemption_requested` is true from
the moment the signal can arrive.

Why a file and not only the signal: the signal is the framework's to handle,
and a handler the script installs replaces any elastic could; the file is there
whoever handles the signal, costs one ``access`` a call, and also tells the
deadline. With ``--preempt-signal none`` the file is the only notice, for loops
that check :func:`preemption_requested` every step and would otherwise die of
SIGTERM's default action before they could save.
"""

from __future__ import annotations

import json
import os

__all__ = ["PREEMPTION_FILE_VAR", "preemption_notice", "preemption_requested"]

PREEMPTION_FILE_VAR = "ELASTIC_PREEMPTION_FILE"
_MAX_NOTICE_READ = 4096

_seen = False  # once true, stays true: a notice is never withdrawn
_path: str | None = None  # ELASTIC_PREEMPTION_FILE, read once: a rank's environment is fixed
_path_read = False


def preemption_requested() -> bool:
    """Whether the launcher asked this rank to save and exit (a preemption notice).

    Cheap enough for every training step: one ``access`` of a local path until the
    notice comes (no exception raised, no environment read after the first call),
    then a global read (``benchmarks/bench_preemption.py``). False without a
    launcher (the variable unset).
    """
    global _seen, _path, _path_read
    if _seen:
        return True
    if not _path_read:
        _path, _path_read = os.environ.get(PREEMPTION_FILE_VAR) or None, True
    if _path is None or not os.access(_path, os.F_OK):
        return False
    _seen = True
    return True


def preemption_notice() -> dict[str, object] | None:
    """The notice, when there is one: ``source`` (``signal SIGUSR1``, ``ray drain of node
    ...``), ``deadline`` (Unix time by which the rank must be gone; ``None``: none given)
    and ``signal`` (what the rank is sent, or ``none``); ``None`` without a notice."""
    path = os.environ.get(PREEMPTION_FILE_VAR)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as file:
            notice = json.loads(file.read(_MAX_NOTICE_READ))
    except (OSError, ValueError):
        return None
    return notice if isinstance(notice, dict) else None
