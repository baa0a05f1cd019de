"""``--exit-timeout`` and ``--exit-hang``: ranks still running after a peer exited 0. Pure.

A rank still running ``--exit-timeout`` after a peer's exit 0 is exit-hung only
when it has also been silent that long: no output, heartbeat or write in the
checkpoint directory, as its node measured (:class:`RankSilence`). A rank still
working (saving, uploading, a last evaluation on rank 0) is left running and
looked at again when it could first have been silent that long. A rank killed as
hung at exit is judged finished on evidence (:func:`elastic.core.rank_ends.judge_finished`:
it said so, its stack was at interpreter exit, or it was silent since a last
checkpoint its peers exited 0 after); the attempt then succeeds. Each function
reads and updates one :class:`Attempt`'s exit-hang bookkeeping and returns what
the controller journals or decides.

The first exit 0 while others run starts the timer (:class:`StartExitTimer`); the
ranks still alive and silent when it passes are killed as hung (:class:`KillExitHung`),
those still working are left running and the timer is set again for them; once every
rank has ended the attempt succeeds on evidence or is decided as a failure.

:class:`ExitHangs` is a part of :class:`elastic.core.controller.controller.Controller`,
built with the shared :class:`elastic.core.controller.state.ControllerState` and its own
settings (``--exit-timeout``, ``--exit-hang``). It writes its records and commands
into that state and begins a success's drain there (one step, in order); what it
cannot decide, a restart after an exit hang, it returns: each handler gives back
the failure for the controller to decide on, or None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from elastic.core.controller.attempts import Attempt, failure_fields
from elastic.core.controller.drain import DrainReason, Draining
from elastic.core.controller.machine import Phase
from elastic.core.controller.state import ControllerState
from elastic.core.events import EventName
from elastic.core.failures import Failure, FailureKind, WorkerExit, to_failure
from elastic.core.labels import rank_list
from elastic.core.messages import (
    ExitHungKilled, ExitTimeoutPassed, KillExitHung, Outcome, RankSilence, StartExitTimer,
)
from elastic.core.policy.restarts import ExitHang
from elastic.core.rank_ends import Finished, HungRank, judge_finished

__all__ = [
    "ExitCheck", "ExitHangs", "check_exit_timeout", "finished_words", "judge_killed",
    "reaped_hung", "settle", "silent_enough", "starts_timer", "still_working",
]

_SIGNS_SHOWN = 3  # spared ranks whose latest sign a check's reason names


def starts_timer(current: Attempt, exit: WorkerExit, timeout_s: float | None) -> float | None:
    """When this exit 0 is the first, the deadline of the ``--exit-timeout`` check (noted); else None."""
    if timeout_s is None or current.exit_timer_from is not None:
        return None
    current.exit_timer_from = (exit.rank, exit.observed_at)
    current.exit_check_at = exit.observed_at + timeout_s
    return current.exit_check_at


def silent_enough(silence: RankSilence | None, timeout_s: float) -> bool:
    """Whether a rank still running at the check is exit-hung: silent for the whole
    timeout, or not measured at all (its node out of reach: nothing says it is alive)."""
    return silence is None or silence.silent_s >= timeout_s


def still_working(silence: RankSilence) -> str:
    """A spared rank's latest sign in words: ``output 0.4 s ago``."""
    if silence.sign == "start":
        return f"started {silence.silent_s:.1f} s ago"
    return f"{silence.sign} {silence.silent_s:.1f} s ago"


@dataclass(frozen=True)
class ExitCheck:
    """What one ``--exit-timeout`` check decided.

    ``hung``: the ranks to kill as hung at exit, and why (``reason``). ``spared``: the
    ranks still running with a recent sign of life, in words (``spared_reason``), and
    ``recheck_at``, when the first of them could have been silent for the timeout.
    """

    hung: tuple[int, ...]
    reason: str
    spared: tuple[RankSilence, ...]
    spared_reason: str
    recheck_at: float | None


def check_exit_timeout(
    current: Attempt, timeout_s: float | None, silences: Sequence[RankSilence], at: float
) -> ExitCheck | None:
    """Sort the ranks still running at a check (``at``) into exit-hung and still working (noted).

    None when no timer runs or no rank is left to look at.
    """
    if timeout_s is None or current.exit_timer_from is None or current.exit_check_at is None:
        return None
    ended = current.exited_ranks | current.exit_hung
    alive = [r for r in range(current.world_size) if r not in ended]
    if not alive:
        return None
    measured = {s.rank: s for s in silences}
    hung = tuple(r for r in alive if silent_enough(measured.get(r), timeout_s))
    spared = tuple(measured[r] for r in alive if not silent_enough(measured.get(r), timeout_s))
    peer, exited_at = current.exit_timer_from
    waited = _seconds(current.exit_check_at - exited_at)
    reason = f"still running {waited} s after rank {peer} exited 0 and silent for {timeout_s:g} s"
    spared_reason, recheck_at = "", None
    if spared:
        signs = ", ".join(
            still_working(s) if len(spared) == 1 else f"rank {s.rank} {still_working(s)}"
            for s in spared[:_SIGNS_SHOWN]
        )
        more = len(spared) - _SIGNS_SHOWN
        spared_reason = (
            f"{rank_list(s.rank for s in spared)} still working {waited} s after rank {peer} exited 0: "
            f"{signs}{f' and {more} more' if more > 0 else ''}"
        )
        recheck_at = at + timeout_s - max(s.silent_s for s in spared)
        current.exit_check_at = recheck_at
    current.exit_hung.update(hung)
    current.exit_hung_unheard.update(hung)
    return ExitCheck(hung, reason, spared, spared_reason, recheck_at)


def _seconds(seconds: float) -> str:
    """A wait in words: ``300``, ``2``, ``0.2``, ``2.1``, ``1520``."""
    return f"{round(seconds, 1):g}" if seconds < 10 else f"{seconds:.0f}"


def judge_killed(
    current: Attempt, seen: Sequence[HungRank], incomplete_checkpoint: str | None = None
) -> dict[int, Finished | None]:
    """Judge each rank just killed as hung at exit on what its node saw (noted): finished, by
    which evidence, or None. The first peer's exit 0 is timed from when the kill was decided;
    ``incomplete_checkpoint``: a save newer than the latest complete one was not whole."""
    peer_exited_s = None
    if current.exit_timer_from is not None and current.exit_kill_at is not None:
        peer_exited_s = current.exit_kill_at - current.exit_timer_from[1]
    judged: dict[int, Finished | None] = {}
    for hung in seen:
        finished = judge_finished(hung, peer_exited_s=peer_exited_s, incomplete_checkpoint=incomplete_checkpoint)
        judged[hung.rank] = finished
        if finished is not None:
            current.exit_hung_finished[hung.rank] = finished
    return judged


def reaped_hung(current: Attempt, exit: WorkerExit) -> Failure | None:
    """A rank killed as hung at exit was reaped: its failure; None when it ended some other way."""
    if exit.hung is None or exit.node_lost is not None or exit.launch_error is not None:
        return None
    failure = to_failure(exit, FailureKind.EXIT_HUNG)
    current.add_failure(failure)
    return failure


def settle(current: Attempt, exit_hang: ExitHang) -> str | Failure | None:
    """Once every rank has ended and each kill as hung at exit is reported: success on
    evidence, else ``--exit-hang``.

    A success's detail, the failure to decide a restart on, or None (not yet, or
    nothing hung). The evidence is each such rank's judgement (:func:`judge_killed`);
    with ``--exit-hang succeed``, a peer's exit 0 is taken as enough. A rank left
    running because it was still working is waited for.
    """
    if current.alive or current.exit_hung_unheard:
        return None
    hung = [f for f in current.failures if f.kind is FailureKind.EXIT_HUNG]
    if not hung:
        return None  # each exited 0 before the kill: the last exit 0 finished the run
    killed = (
        f"{rank_list(f.rank for f in hung)} hung at exit and "
        f"{'was' if len(hung) == 1 else 'were'} killed"
    )
    unfinished = [f for f in hung if f.rank not in current.exit_hung_finished]
    if not unfinished:
        return f"finished; {killed}, judged finished: {finished_words(current, [f.rank for f in hung])}"
    if exit_hang is ExitHang.SUCCEED:
        assert current.exit_timer_from is not None
        return f"finished (--exit-hang succeed: rank {current.exit_timer_from[0]} exited 0); {killed}"
    return min(unfinished, key=lambda f: (f.observed_at, f.rank))


def finished_words(current: Attempt, ranks: Sequence[int]) -> str:
    """Why these ranks were judged finished: ``its main thread was at interpreter exit (...)``
    for one rank; each rank's reason after its number for several."""
    judged = [current.exit_hung_finished[r] for r in sorted(set(ranks)) if r in current.exit_hung_finished]
    if len(judged) == 1:
        return judged[0].why
    return "; ".join(f"rank {f.rank}: {f.why}" for f in judged)


_SIGNS_JOURNALED = 16  # spared ranks whose latest sign a record holds (all are in its ranks)
_JUDGED_JOURNALED = 16  # killed ranks whose judgement a record holds (all are in its ranks)


def _judged_fields(seen: HungRank, finished: Finished | None) -> dict[str, object]:
    """One killed rank's judgement as the ``exit_hung_killed`` record holds it."""
    return {
        "finished": finished is not None,
        "evidence": None if finished is None else finished.evidence.value,
        "why": None if finished is None else finished.why,
        "frame": seen.frame,
        "error": seen.error,
    }


class ExitHangs:
    """Times the ranks still running after a peer exited 0, kills them as hung, settles the attempt.

    Its handlers return the failure the controller is to decide a restart on, if any.
    """

    def __init__(self, state: ControllerState, *, timeout_s: float | None, on_hang: ExitHang) -> None:
        self._state = state
        self._timeout_s = timeout_s  # --exit-timeout
        self._on_hang = on_hang  # --exit-hang

    def on_clean_exit(self, current: Attempt, exit: WorkerExit) -> Failure | None:
        """A rank exited 0 while others run: the first one starts the ``--exit-timeout`` clock."""
        state = self._state
        if current.exit_hung:
            return self._settle(current)  # it beat the kill, or it was left working and is done
        if state.draining is not None or state.phase not in (Phase.LAUNCHING, Phase.RUNNING):
            return None
        deadline_at = starts_timer(current, exit, self._timeout_s)
        if deadline_at is None:
            return None
        assert self._timeout_s is not None
        state.record(
            EventName.EXIT_TIMER_STARTED,
            rank=exit.rank,
            exit_timeout_s=self._timeout_s,
            still_running=current.world_size - len(current.exited_ranks),
        )
        state.command(StartExitTimer(current.number, deadline_at))
        return None

    def on_exit_timeout(self, seen: ExitTimeoutPassed) -> None:
        """Ranks still alive ``--exit-timeout`` after a peer exited 0 and silent as long are hung
        at exit; those with a later sign of life are looked at again when they could be."""
        state = self._state
        current = state.current
        if (
            current is None or seen.attempt != current.number
            or state.phase is not Phase.RUNNING or state.draining is not None
        ):
            return
        check = check_exit_timeout(current, self._timeout_s, seen.silences, seen.at)
        if check is None:
            return
        if check.hung:
            current.exit_kill_at = state.now
            state.record(EventName.EXIT_HANG_DETECTED, ranks=list(check.hung), reason=check.reason)
            state.command(KillExitHung(current.number, check.hung, check.reason, state.now))
        if check.recheck_at is not None:
            signs = {
                str(s.rank): {"sign": s.sign, "silent_s": round(s.silent_s, 3)}
                for s in check.spared[:_SIGNS_JOURNALED]
            }
            state.record(
                EventName.EXIT_HANG_SPARED,
                ranks=[s.rank for s in check.spared],
                reason=check.spared_reason,
                signs=signs,
                recheck_in_s=round(check.recheck_at - seen.at, 3),
            )
            state.command(StartExitTimer(current.number, check.recheck_at))

    def on_exit_hung_killed(self, seen: ExitHungKilled) -> Failure | None:
        """The node killed ranks as hung at exit and says what it saw of each: judged, then settled."""
        current = self._state.current
        if (
            current is None or seen.attempt != current.number
            or not current.exit_hung_unheard.intersection(seen.ranks)
        ):
            return None
        current.exit_hung_unheard.difference_update(seen.ranks)
        judged = judge_killed(current, seen.seen, seen.incomplete_checkpoint)
        self._state.record(
            EventName.EXIT_HUNG_KILLED,
            ranks=list(seen.ranks),
            declared_finished=sorted(h.rank for h in seen.seen if h.declared_done),
            # Each killed rank's evidence that it finished (None: none), and where its stack was.
            judged={str(h.rank): _judged_fields(h, judged.get(h.rank)) for h in seen.seen[:_JUDGED_JOURNALED]},
        )
        return self._settle(current)

    def on_reaped(self, current: Attempt, failure: Failure) -> Failure | None:
        """A rank killed as hung at exit was reaped (:func:`reaped_hung`): journaled, then settled."""
        self._state.record(EventName.WORKER_FAILED, **failure_fields(failure))
        return self._settle(current)

    def _settle(self, current: Attempt) -> Failure | None:
        """Once every rank has ended (:func:`settle`): drain as succeeded, or the failure to decide on."""
        if self._state.draining is not None:
            return None
        settled = settle(current, self._on_hang)
        if isinstance(settled, Failure):
            return settled
        if settled is not None:
            self._state.drain(Draining(DrainReason.SUCCEEDED, Phase.DONE, Outcome.SUCCEEDED, settled))
        return None
