"""A rank's start-up as its node reads it: the rank bootstrap's marks, read when its first step is seen.

The marks are the rank's (``ELASTIC_STARTUP_FILE``, written by
``elastic/worker/bootstrap/startup_marks.py``), the spawn request and the first step
the node's own, all on this host's wall clock; what they mean is
:mod:`elastic.core.training.startup`'s. One bounded read of the file, once a rank:
its start-up phases, and what it had imported by its first step (for its warm
successor, ``--prewarm-memory``).
"""

from __future__ import annotations

from elastic.core.launch.spec import WorkerSpec
from elastic.core.training.startup import FILE_TIME_TICK_S, RankImports, rank_phases, read_imports, read_marks
from elastic.worker.bootstrap.startup_marks import STARTUP_FILE_VAR

__all__ = ["rank_startup"]

_MAX_READ = 64 * 1024  # a few dozen lines: more is a rank (or its children) writing in a loop


def rank_startup(
    spec: WorkerSpec, *, spawned_at: float | None, first_step_at: float
) -> tuple[tuple[tuple[str, float], ...], RankImports | None]:
    """The rank's start-up phases, in order, up to its first step (``first_step_at``, wall clock),
    empty when its file is missing or holds no ``interpreter`` mark; and the packages it had
    imported by then, None when it said nothing of them."""
    path = spec.env.get(STARTUP_FILE_VAR)
    if not path:
        return (), None
    try:
        with open(path, "rb") as marks:
            text = marks.read(_MAX_READ).decode("utf-8", errors="replace")
    except OSError:
        return (), None
    phases = rank_phases(read_marks(text), spawned_at=spawned_at, first_step_at=first_step_at)
    imports = read_imports(text, before=first_step_at + FILE_TIME_TICK_S)  # its log's time: a tick behind
    return tuple((name, round(seconds, 6)) for name, seconds in phases.items()), imports
