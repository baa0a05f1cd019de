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
whoever handles the signal, costs one ``stat`` a call, and also tells the
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


def preemption_requested() -> bool:
    """Whether the launcher asked this rank to save and exit (a preemption notice).

    Cheap enough for every training step: one ``stat`` of a local path until the
    notice comes, a global read after (see ``benchmarks/``). False without a
    launcher (the variable unset).
    """
    global _seen
    if _seen:
        return True
    path = os.environ.get(PREEMPTION_FILE_VAR)
    if not path:
        return False
    try:
        os.stat(path)
    except OSError:
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
