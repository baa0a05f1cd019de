"""A rank's program that compiled into another cache than the one elastic handed over, journaled once.

The rank bootstrap notes, at each rank's first JAX compile, where JAX caches
(``attempt-K/rank-R.jax-cache.json``, :mod:`elastic.worker.bootstrap.jax_cache_note`).
After each drain the driver reads the notes of the attempt that its own node's
run directory holds and journals the first that shows elastic's cache replaced
(``compile_cache_replaced``, with the words of
:func:`elastic.core.launch.compile_caches.jax_cache_replaced`); the summary repeats it.
On a Ray cluster that is the ranks of the driver's node.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from elastic.core.launch.compile_caches import jax_cache_replaced
from elastic.core.events import EventName, Record
from elastic.core.run_layout import RunLayout
from elastic.node.clock import Clock
from elastic.worker.bootstrap.jax_cache_note import NOTE_SUFFIX

__all__ = ["CacheWatch"]

_NOTE = re.compile(rf"rank-(\d+){re.escape(NOTE_SUFFIX)}")


class CacheWatch:
    """Reads an attempt's cache notes after its drain; journals the first replacement of the run."""

    def __init__(
        self, layout: RunLayout, handed: str | None, *, write: Callable[[Record], None], clock: Clock,
        journaled: bool = False,
    ) -> None:
        self._layout = layout
        self._handed = handed  # JAX_COMPILATION_CACHE_DIR as elastic set it; None: it set none
        self._write = write
        self._clock = clock
        self._journaled = journaled  # by this run's earlier driver, if it is resumed

    def check(self, attempt: int) -> None:
        """Journal the first rank of ``attempt`` whose JAX did not cache where elastic said, once a run."""
        if self._handed is None or self._journaled:
            return
        found = (_NOTE.fullmatch(path.name) for path in self._layout.attempt_dir(attempt).glob(f"rank-*{NOTE_SUFFIX}"))
        for rank in sorted(int(match[1]) for match in found if match):
            try:
                note = json.loads(self._layout.jax_cache_note(attempt, rank).read_text())
            except (OSError, ValueError):
                continue  # unreadable or cut short: no note
            reason = jax_cache_replaced(note, self._handed) if isinstance(note, dict) else None
            if reason is not None:
                self._journaled = True
                self._write(Record(
                    EventName.COMPILE_CACHE_REPLACED, self._clock.monotonic(), attempt,
                    {"rank": rank, "framework": "jax", "cache_dir": note.get("jax_compilation_cache_dir"),
                     "handed": self._handed, "reason": reason},
                ))
                return
