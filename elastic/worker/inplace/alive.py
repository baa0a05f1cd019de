"""A rank's signs of life while its process group re-forms.

Re-forming takes no training step: the survivor leaves the broken group, joins the next
generation, agrees on the step to go back to and sends the state to the spare, and the spare
joins. A launcher watching heartbeats (``--heartbeat-timeout``) would call such a rank hung, and
a spare handed a lost rank's heartbeat file would look as silent as the rank it replaces. So from
the start of a later generation's join until its first committed step, a thread of its own beats
(no step) every :data:`~elastic.worker.heartbeat.BEAT_INTERVAL_S`. A join that never ends is the
launcher's to end (``--reform-timeout``), not the hang watch's. Standard library only.
"""

from __future__ import annotations

import threading

from elastic.worker.heartbeat import BEAT_INTERVAL_S, heartbeat

__all__ = ["FormingBeat"]


class FormingBeat:
    """Beats from its own thread between :meth:`start` and :meth:`stop` (which waits for the
    thread, so the rank's own beats never meet its)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="elastic-inplace-reforming", daemon=True)

    def start(self) -> FormingBeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _beat(self) -> None:
        heartbeat()
        while not self._done.wait(BEAT_INTERVAL_S):
            heartbeat()
