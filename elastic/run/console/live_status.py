"""The terminal's status line, live: the training step as the nodes report it, and the newest
complete checkpoint on disk, looked for by a thread of its own.

The line is drawn again after each line written above it, and every :data:`REDRAW_EVERY_S`
when its text changed: a node sends a rank's latest step at most every
:data:`elastic.node.watchers.steps.REPORT_EVERY_S` (one second), so the step shown is about a
second behind the ranks' output at most.

The driver scans ``--checkpoint-dir`` only at an attempt's start and end (the checkpoint it
hands over); a person watching a run wants the one the ranks saved last, so while the status
line is shown, :class:`LiveStatus` scans the directory every :data:`CHECKPOINT_POLL_S`, off
the driver's loop and the console's writer. What it finds is shown, never journaled.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path

from elastic.core.checkpoints.selection import Checkpoint
from elastic.run.watches.checkpoint_scan import CheckpointDirError, scan_checkpoints

__all__ = ["CHECKPOINT_POLL_S", "REDRAW_EVERY_S", "LiveStatus"]

CHECKPOINT_POLL_S = 5.0
REDRAW_EVERY_S = 0.25  # the line is looked at this often, drawn only when it changed
_STOP_WAIT_S = 5.0  # a scan stuck on a network file system is left behind (daemon thread)


class LiveStatus:
    """The status line's text (``status_text(checkpoint)``, the driver's), with the newest
    checkpoint this object's poll found; :meth:`start` and :meth:`stop` bound the poll."""

    def __init__(
        self,
        status_text: Callable[[Checkpoint | None], str],
        directory: Path | None,
        pattern: re.Pattern[str] | None,
        *,
        poll_s: float = CHECKPOINT_POLL_S,
    ) -> None:
        self._status_text = status_text
        self._directory = directory
        self._pattern = pattern
        self._poll_s = poll_s
        self._newest: Checkpoint | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Look for the newest checkpoint now and every ``poll_s`` (nothing without a directory)."""
        if self._directory is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._poll, name="elastic-checkpoint-poll", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(_STOP_WAIT_S)

    def text(self) -> str:
        return self._status_text(self._newest)

    def _poll(self) -> None:
        assert self._directory is not None
        while not self._stopped.is_set():
            try:
                found = scan_checkpoints(self._directory, self._pattern).latest
            except CheckpointDirError:
                found = None  # the driver warns of it at the attempt's end; the line keeps the last
            if found is not None:
                self._newest = found
            self._stopped.wait(self._poll_s)
