"""When a rank's warm successor starts (``--prewarm-memory``): once the rank is past its start-up. Pure.

Without ``--prewarm`` modules, a rank's successor imports what the rank had
imported (its start-up file's ``imports`` record, written by
``elastic/worker/bootstrap/startup_marks.py``); it starts as soon as the rank is
past its start-up, by the first of:

- its first training step, read from its output or heartbeat (the step watch
  sends it with the rank's start-up profile);
- the return of its distributed initialisation (``init_end``: ``init_process_group``,
  ``jax.distributed.initialize``), which every rank of a job reaches, whether it
  prints its steps or not;
- its sign of life once it is past start-up: a heartbeat file written
  (``elastic.heartbeat``), or output after :data:`elastic.core.evidence.STARTUP_WITHOUT_STEP_S`
  (:func:`elastic.core.evidence.past_startup`).

So every rank of a DDP job where only rank 0 prints gets its successor, and a
program that prints no step at all too. What it imported is the last ``imports``
record written by then; a rank that shows none (no distributed initialisation,
no restore) has nothing to prewarm.
"""

from __future__ import annotations

from collections.abc import Mapping

from elastic.core.evidence import past_startup

__all__ = ["INIT_RETURNED", "successor_due"]

INIT_RETURNED = "init_end"  # the start-up mark written when the distributed initialisation returned


def successor_due(marks: Mapping[str, float], *, beat: bool, printed: bool, ran_s: float) -> bool:
    """Whether a rank still running is past its start-up for its warm successor: its start-up
    ``marks`` (:func:`elastic.core.training.startup.read_marks`) show its distributed
    initialisation returned, it wrote its heartbeat file (``beat``), or it ``printed`` and ran
    ``ran_s`` past :data:`elastic.core.evidence.STARTUP_WITHOUT_STEP_S`. (Its first step is the
    step watch's to send.)"""
    if INIT_RETURNED in marks or beat:
        return True
    return past_startup(step_seen=False, ran_s=ran_s, printed=printed)
