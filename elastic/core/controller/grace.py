"""How long a drain lets ranks live between the stop signal and SIGKILL, and why. Pure.

A drain's cause decides its grace. After a failure the surviving ranks are
collateral: their collective is already broken (a distributed checkpoint needs
every rank, so they cannot save), and all they need is to flush and exit, so they
get ``--failure-grace`` (a few seconds). A stop asked of the launcher, a scale-up
at a checkpoint, a preemption notice and a run that ended let ranks finish what
they were told to do and get ``--grace-period``.
"""

from __future__ import annotations

from dataclasses import dataclass

from elastic.core.controller.drain import DrainReason

__all__ = ["DEFAULT_FAILURE_GRACE_S", "Grace", "drain_grace"]

# Python exits on SIGTERM within a fraction of a second; a handler that flushes logs or
# writes an error file needs about a second more. 5 s covers that on a loaded machine,
# where the 30 s a checkpoint may need is lost on every restart (JAX's survivors, which
# never exit on SIGTERM, wait out the whole grace).
DEFAULT_FAILURE_GRACE_S = 5.0


@dataclass(frozen=True)
class Grace:
    """The seconds a drain waits, the option that set them, and why that one applies."""

    seconds: float
    option: str
    why: str

    def fields(self) -> dict[str, object]:
        """As the drain's ``phase_changed`` record holds it."""
        return {"grace_s": self.seconds, "grace_option": self.option, "grace_why": self.why}


_WHY = {
    DrainReason.SUCCEEDED: "the ranks' work is done",
    DrainReason.STOP_REQUESTED: "the launcher was asked to stop: ranks may save and exit",
    DrainReason.SCALE_UP: "the world grows at a checkpoint: ranks may save and exit",
    DrainReason.PREEMPTION: "a preemption (a notice, or a rank stopped by a signal from outside): ranks may save and exit",
    DrainReason.STRAGGLER: "a straggler's node is left out: ranks may save and exit",
}


def drain_grace(
    reason: DrainReason, *, grace_period_s: float, failure_grace_s: float, deadline_s: float | None = None
) -> Grace:
    """The grace of a drain for ``reason``: the notice's own deadline when it gave one,
    ``--failure-grace`` after a failure, else ``--grace-period``."""
    if deadline_s is not None:
        return Grace(deadline_s, "the notice's deadline", "a preemption notice: ranks may save until the node goes")
    if reason is DrainReason.FAILURE:
        return Grace(
            failure_grace_s, "--failure-grace",
            "after a failure the surviving ranks are collateral: their group is already broken",
        )
    return Grace(grace_period_s, "--grace-period", _WHY.get(reason, f"drain for {reason.value}"))
