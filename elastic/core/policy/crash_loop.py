"""Attempts in a row that ended without progress: the crash loop and the backoff level. Pure.

The streak carries over a driver's death: :func:`taken_over` ends the attempt a
dead driver ran, as recovery found it.
"""

from __future__ import annotations

from dataclasses import dataclass

from elastic.core.journal.fold import made_progress
from elastic.core.labels import plural
from elastic.core.messages import Resumed
from elastic.core.policy.restarts import Backoff

__all__ = ["NoProgressStreak", "taken_over"]


@dataclass(frozen=True)
class NoProgressStreak:
    """How many attempts in a row ended toward a relaunch without a newer checkpoint."""

    count: int = 0

    def ended(self, progressed: bool) -> NoProgressStreak:
        """An attempt ended toward a relaunch: the streak goes on or restarts."""
        return NoProgressStreak(0 if progressed else self.count + 1)

    def crash_loop(self, tracks_progress: bool, max_no_progress: int | None) -> str | None:
        """The crash loop's detail when ``--max-no-progress`` attempts in a row ended without progress."""
        if not tracks_progress or max_no_progress is None or self.count < max_no_progress:
            return None
        return (
            f"crash loop: {plural(self.count, 'attempt')} in a row ended without a "
            f"newer checkpoint (--max-no-progress {max_no_progress})"
        )

    def backoff(self, backoff: Backoff) -> tuple[float, int]:
        """The wait before the next attempt and its level: none after progress or the first failure."""
        level = self.count - 1
        return (backoff.delay_s(level) if level > 0 else 0.0), level


def taken_over(resumed: Resumed, tracks_progress: bool) -> tuple[NoProgressStreak, bool | None]:
    """A dead driver's streak, its interrupted attempt counted as ended; and whether that
    attempt made progress (None when none was running).

    Only an attempt that failed on its own extends the streak: one with a failure journaled
    (``Resumed.last_cause``: the interrupted attempt is the last that started) and no newer
    checkpoint. One that was training with no failure when its driver died, or was ending for a
    preemption notice (the machine taken at the deadline), was ended by the driver's death, as a
    notice's drain is under a live driver (:class:`elastic.core.controller.controller.Controller`):
    no sign of a crash loop. Counted, three driver deaths in a row (a spot burst taking the
    driver's machine, an operator's ``kill -9``) ended a fixable run as a crash loop, the costlier
    error than one restart too many; a driver that keeps dying is bounded by whatever restarts it
    (Slurm's requeue limit, a Job's ``backoffLimit``). Progress still ends the streak."""
    streak = NoProgressStreak(resumed.no_progress_streak)
    if resumed.interrupted is None:
        return streak, None
    progressed = tracks_progress and made_progress(resumed.interrupted_resume_step, resumed.checkpoint_step)
    ended_by_the_driver = resumed.interrupted_by_notice or resumed.last_cause is None
    if ended_by_the_driver and not progressed:
        return streak, progressed
    return streak.ended(progressed), progressed
