"""In-place restarts, worker side: a rank that survives a peer's loss in its own process.

:mod:`elastic.worker.inplace.generations` is what a training loop uses
(:class:`~elastic.worker.inplace.generations.InPlace`, re-exported here); the
launcher's word that a generation is over is :mod:`elastic.worker.inplace.notice`,
read by the thread of :mod:`elastic.worker.inplace.watch`, which leaves a broken
gloo collective by :mod:`elastic.worker.inplace.sockets`; each committed step is
kept in host memory by :mod:`elastic.worker.inplace.snapshot`. Standard library
only at import: torch is imported when the generations begin.
"""

from __future__ import annotations

from elastic.worker.inplace.generations import Generation, GenerationOver, InPlace

__all__ = ["Generation", "GenerationOver", "InPlace"]
