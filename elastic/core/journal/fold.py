"""The one reading of a run's journal: a pure fold of its records into what the run amounted to.

The journal holds what the controller observed and decided: every decision record
(``attempt_started`` with the plan it accepted, ``restart_scheduled`` with its
budget, ``root_cause_revised``, ``backoff_started`` with its level,
``workers_stopped`` with the attempt's progress and the crash-loop streak,
``worker_failed`` with its log tail) is the controller's. Everything that reads a
run reads it through :class:`RunFold`:

- recovery (:mod:`elastic.core.journal.recovery`): the next attempt, the budgets' charges, the
  crash-loop streak (which is also the backoff level), the attempt the dead driver
  was running and the last plan's world;
- ``elastic status`` (:mod:`elastic.views.status`), ``elastic report``'s timeline
  (:mod:`elastic.core.journal.timeline`) and ``report.json`` (:mod:`elastic.views.report`);
- the live metrics: the driver folds every record as it journals it, so the gauge,
  the report and the timeline are one computation.

Why one shared reducer and not a replay of observations through the controller:
the journal does not hold the observations whole (heartbeat ages, the backend's
node lists, scale checks), and a replay would re-decide with today's code and
flags what an older driver decided with its own (another ``--max-restarts``, a
changed rule), so an old run would read differently from what happened. The
decisions are journaled as facts and read here; the rules that both the controller
and the fold need (root cause, progress, phase reached) are defined once,
in :mod:`elastic.core.journal.folded` and :mod:`elastic.core.failures`, and the controller calls them.

Record format: the first record (``run_started``) carries ``journal_version``;
journals without it are version 1 (before issue 10) and read the same, except that
they journal no streak, signal number or log tail (a resumed version-1 run starts
its streak at 0, as before); a newer version is refused by name. What each record
must hold to be folded, and the complaint when it does not, is
below (the readers that raise :class:`FoldError`). Pure: no I/O, no clock.

The fold reads every record through the readers below: its time, its attempt,
the format version of the first, the plan of an ``attempt_started`` and the root
cause of ``run_finished`` (both read whole later, by status, the timeline and
recovery, so refused here, by their line). A record that cannot be read is a
:class:`FoldError` naming it by its index, which the journal's reader turns into
the file and line (:meth:`elastic.run.records.journal.Journal.unreadable`).
"""

from __future__ import annotations

import math

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from elastic.core.journal.folded import (
    DRIVER_DIED, CollateralCount, FailureMark, FoldedAttempt, Span, failure_from, failure_mark, goodput, made_progress, optional_int, productive, split_backoff,
)

__all__ = [
    "BAD_FIELD", "JOURNAL_VERSION", "CollateralCount", "FailureMark", "FoldError", "FoldedAttempt",
    "RunFold", "Span", "check_plan", "check_root_cause", "failure_from", "fold", "goodput",
    "journal_version", "made_progress", "productive", "record_attempt", "record_time",
    "record_wall",
]

JOURNAL_VERSION = 2  # 1: no version field (before issue 10); 2: streak and progress journaled

# What reading a field of the wrong type or value raises (``int(None)``, ``None.items()``).
BAD_FIELD = (TypeError, ValueError, KeyError, AttributeError, IndexError)


class FoldError(Exception):
    """A journal that holds no run, an event without a readable time or with a field of
    the wrong type, or a newer format; ``index`` is the event's (from 0), where there is one."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


def record_time(event: Mapping[str, Any], index: int) -> datetime:
    """The record's time; a :class:`FoldError` when it has none that reads."""
    try:
        return datetime.fromisoformat(str(event["time"]))
    except (KeyError, ValueError):
        raise FoldError(f"event {index + 1} ({event.get('event')}) has no readable time", index) from None


def record_wall(event: Mapping[str, Any]) -> float:
    """The record's time in epoch seconds (it has been read once already)."""
    return datetime.fromisoformat(str(event["time"])).timestamp()


def record_attempt(event: Mapping[str, Any], default: int, number: int) -> int:
    """The attempt a record speaks of (``default`` when it names none); ``number`` is its
    position from 1, for the complaint."""
    attempt = event.get("attempt", default)
    if optional_int(attempt) is None or attempt < 0:
        raise FoldError(f"event {number} ({event.get('event')}) has attempt {attempt!r}, not a whole number")
    return int(attempt)


def journal_version(first: Mapping[str, Any]) -> int:
    """The format version the first record declares (1 without one); a newer one is refused."""
    version = first.get("journal_version", 1)
    if not isinstance(version, int) or version > JOURNAL_VERSION:
        raise FoldError(
            f"journal format version {version!r} is newer than this elastic reads "
            f"(up to {JOURNAL_VERSION}); read it with a newer elastic"
        )
    return version


def check_plan(event: Mapping[str, Any], number: int) -> None:
    """An ``attempt_started``'s plan has the shape its readers expect."""
    nodes, nproc, world = event.get("nodes", []), event.get("nproc_per_node", []), event.get("world_size")
    if not (
        isinstance(nodes, list) and isinstance(nproc, list)
        and all(optional_int(n) is not None for n in nproc)
        and (world is None or optional_int(world) is not None)
    ):
        raise FoldError(
            f"event {number} (attempt_started) has a plan of the wrong shape: nodes "
            f"{nodes!r}, nproc_per_node {nproc!r}, world_size {world!r}"
        )


def check_root_cause(event: Mapping[str, Any]) -> None:
    """A ``run_finished``'s root cause, when it has one, reads as a failure."""
    cause = event.get("root_cause")
    if isinstance(cause, Mapping):
        failure_from(cause)


# Two listings of one save (a drain's, then a takeover's) differ by the moments between reading
# the clock and writing the record.
_SAME_SAVE_S = 0.05
_REACHED = ("pending", "launching", "running")  # phases an attempt goes through, in order
_STEP_MARKS = ("first_step_seen", "step_reached")  # records that place a training step in time


class RunFold:
    """The fold's state; :meth:`apply` takes journal records (dicts) in order."""

    def __init__(self, *, strict_times: bool = True) -> None:
        self._strict_times = strict_times  # else a record without a readable time is at the last one's
        self.origin: datetime | None = None
        self.version = 1
        self.run_id = "?"
        self.driver_pid: int | None = None
        self.phase = "pending"
        self.attempts: dict[int, FoldedAttempt] = {}
        self.current = 0  # the highest attempt number seen
        self.next_attempt = 0  # after the last attempt_started
        self.charges: dict[str, list[float]] = {"failures": [], "preemptions": []}
        self.no_progress_streak = 0
        self.finished: Mapping[str, Any] | None = None
        self.resumed_at_s: list[float] = []
        self.checkpoint_notes: list[Mapping[str, Any]] = []
        # Checkpoint saves, (began, committed) since the run started, as the drains' records list them.
        self.checkpoint_saves: list[tuple[float, float]] = []
        self.cache_replaced: Mapping[str, Any] | None = None  # the first compile_cache_replaced
        # Suspected nodes (elastic.core.diagnosis.nodes): node_excluded and node_kept records, in order.
        self.node_verdicts: list[Mapping[str, Any]] = []
        self.last_started: Mapping[str, Any] | None = None
        self.now_s = 0.0
        self._since = 0.0
        self._backoff: tuple[float, float] | None = None
        self._count = 0
        self._begins = 0.0  # when the next attempt begins: the last relaunch or takeover
        self._driver_gone_s: float | None = None  # a later driver's start: the last record of the one before

    # -- reading -----------------------------------------------------------------------

    def at_s(self, event: Mapping[str, Any]) -> float:
        """Seconds since the run started, of a record."""
        try:
            when = record_time(event, self._count)
        except FoldError:
            if self._strict_times:
                raise
            return self.now_s
        if self.origin is None:  # the run's start: the launcher process's, when its first record says
            self.origin = when - timedelta(seconds=_process_age_s(event))
        return (when - self.origin).total_seconds()

    def apply(self, event: Mapping[str, Any]) -> None:
        """Fold one record in; :class:`FoldError` names a record that cannot be (by its index)."""
        index = self._count
        try:
            self._apply(event)
        except FoldError as error:
            error.index = index if error.index is None else error.index
            raise
        except BAD_FIELD as error:
            raise FoldError(
                f"event {index + 1} ({event.get('event')}) has a field of the wrong type or value: {error}",
                index,
            ) from error

    def _apply(self, event: Mapping[str, Any]) -> None:
        # The journal's time, never backwards: a record dated before the one before it (a
        # journal written before the controller kept one clock, a record the driver wrote
        # beside the controller's) is read at that one's time, so no phase starts before the
        # previous one ended and the ledger's causes add up to the run's wall time.
        at_s = max(self.at_s(event), self.now_s)
        name = event.get("event")
        if self._count == 0:
            self._first(event)
            # The launcher's own start-up before it (process_started_s_ago) is no phase: the ledger's "other".
            self._since = self._begins = at_s
        elif name == "run_started":  # a later driver: the one before wrote nothing after its last record
            self._driver_gone_s = self.now_s
        self._count += 1
        attempt = record_attempt(event, self.current, self._count)
        if name == "run_resumed":  # the old driver died somewhere after its last event
            self.finished = None  # or ended it with 75, "requeue me", and this driver goes on
            # Its last phase ran until its last record, not until this driver started: what came
            # between is not known (the ledger's "other"), but what its workers_stopped says.
            self._close(self.now_s if self._driver_gone_s is None else self._driver_gone_s, self.current)
            self.phase, self._since = "pending", at_s
            self.resumed_at_s.append(at_s)
            self._begins = at_s
        self.current = max(self.current, attempt)
        draft = self._attempt(attempt)
        handler = _HANDLERS.get(str(name))
        if handler is not None:
            handler(self, event, draft, at_s)
        if name in _STEP_MARKS and optional_int(event.get("step")) is not None:  # the goodput ledger's
            draft.step_marks.append((_seen_at_s(event, at_s, draft), _placed_step(event)))
            # A step_reached that says when its step was seen is the attempt's latest step as of
            # then: what follows it was no training. A first step's seen_s_ago only dates it.
            draft.steps_placed_when_seen |= name == "step_reached" and "seen_s_ago" in event
            if draft.exit_timer_s is not None and optional_int(event.get("rank")) not in draft.exited_0:
                draft.stepped_after_exit_0_s = at_s  # a rank still running trained on after a peer's exit 0
        self.now_s = at_s

    def _first(self, event: Mapping[str, Any]) -> None:
        self.run_id = str(event.get("run_id", "?"))
        self.version = journal_version(event)

    def _attempt(self, number: int) -> FoldedAttempt:
        draft = self.attempts.get(number)
        if draft is None:
            draft = self.attempts[number] = FoldedAttempt(number, begun_s=self._begins)
        return draft

    def _close(self, at_s: float, attempt: int) -> None:
        if self.phase != "done" and at_s > self._since:
            span = Span(self.phase, self._since, at_s)
            self._attempt(attempt).spans.extend(split_backoff(span, self._backoff))
            if span.phase == "pending":  # the controller journals the backoff before the drain ends
                self._backoff = None

    # -- handlers ----------------------------------------------------------------------

    def _on_run_started(self, event: Mapping[str, Any], _: FoldedAttempt, __: float) -> None:
        self.driver_pid = optional_int(event.get("pid"))

    def _on_phase_changed(self, event: Mapping[str, Any], draft: FoldedAttempt, at_s: float) -> None:
        if event.get("trigger") == "adopt" and self._adopt(draft):
            return
        self._close(at_s, draft.number)
        self.phase, self._since = str(event.get("dest")), at_s
        if self.phase in _REACHED and _REACHED.index(self.phase) > _REACHED.index(draft.reached):
            draft.reached = self.phase
        if self.phase == "running" and (draft.launched_s is None or event.get("trigger") != "adopt"):
            draft.launched_s = at_s  # an adopted attempt keeps the launch its first driver made
        elif self.phase == "draining" and draft.drain_started_s is None:
            draft.drain_started_s = at_s
            draft.drain_reason = None if event.get("reason") is None else str(event["reason"])
            draft.ended_at_drain = frozenset(draft.exited_0 | {f.rank for f in draft.failures if f.rank is not None})
            if "grace_s" in event:  # which grace the ranks got, and why (since issue 11)
                draft.drain_grace = {k: event.get(k) for k in ("grace_s", "grace_option", "grace_why")}
        elif event.get("trigger") in ("relaunch", "reform"):  # a reform: its world re-formed in place (--spares)
            draft.restarted = True
            self._begins = at_s
            following = self.attempts.get(draft.number + 1)  # its backoff_started came first
            if following is not None and not following.spans:
                following.begun_s = at_s

    def _on_sign_of_life_seen(self, event: Mapping[str, Any], draft: FoldedAttempt, at_s: float) -> None:
        if draft.sign_of_life_s is None:
            draft.sign_of_life_s, draft.sign_of_life = at_s, event

    def _on_first_step_seen(self, event: Mapping[str, Any], draft: FoldedAttempt, at_s: float) -> None:
        if draft.first_step_s is None:  # when it was seen: its record can be dated later (seen_s_ago)
            draft.first_step_s, draft.first_step = _seen_at_s(event, at_s, draft), event

    def _on_startup_profiled(self, event: Mapping[str, Any], draft: FoldedAttempt, _: float) -> None:
        if draft.startup_profiled is None:
            draft.startup_profiled = event

    def _adopt(self, draft: FoldedAttempt) -> bool:
        """An attempt a later driver took over with its ranks running: they ran through the
        driver's outage, so its running goes on from where it began, as one span (the time
        between two drivers is training, or whatever its steps say it was); False when it had
        no running span last to go on from."""
        if not draft.spans or draft.spans[-1].phase != "running":
            return False
        self.phase, self._since = "running", draft.spans.pop().start_s
        return True

    def _on_attempt_adopted(self, event: Mapping[str, Any], draft: FoldedAttempt, _: float) -> None:
        draft.adopted = event

    def _on_step_reached(self, event: Mapping[str, Any], draft: FoldedAttempt, _: float) -> None:
        draft.step_reached = event

    def _on_ranks_started(self, event: Mapping[str, Any], draft: FoldedAttempt, _: float) -> None:
        draft.ranks_started = event

    def _on_rank_pids(self, event: Mapping[str, Any], draft: FoldedAttempt, _: float) -> None:
        pids = event.get("pids")
        if isinstance(pids, Mapping):
            draft.pids = {int(rank): int(pid) for rank, pid in pids.items()
                          if str(rank).isdigit() and isinstance(pid, int) and not isinstance(pid, bool)}

    def _on_straggler_seen(self, event: Mapping[str, Any], draft: FoldedAttempt, at_s: float) -> None:
        draft.stragglers.append({**event, "at_s": at_s})

    def _on_backoff_started(self, event: Mapping[str, Any], _: FoldedAttempt, at_s: float) -> None:
        self._backoff = (at_s, float(event.get("delay_s") or 0.0))

    def _on_attempt_started(self, event: Mapping[str, Any], draft: FoldedAttempt, _: float) -> None:
        check_plan(event, self._count)  # read whole later (status, timeline, recovery)
        draft.started = event
        self.last_started = event
        self.next_attempt = max(self.next_attempt, draft.number + 1)

    def _on_worker_exited(self, event: Mapping[str, Any], draft: FoldedAttempt, at_s: float) -> None:
        rank = optional_int(event.get("rank"))
        if rank is not None:
            draft.exited_0.add(rank)
            if draft.first_exit_0 is None:
                draft.first_exit_0 = (rank, at_s, len(draft.failures))
            if event.get("finished"):
                draft.finished_in_teardown[rank] = str(event["finished"])

    def _on_worker_failed(self, event: Mapping[str, Any], draft: FoldedAttempt, at_s: float) -> None:
        draft.failures.append(failure_mark(event, at_s))

    def _on_root_cause_revised(self, event: Mapping[str, Any], draft: FoldedAttempt, _: float) -> None:
        # The controller journals the lost node's failure, then this: all before it were consequences.
        draft.superseded = max(0, len(draft.failures) - 1)
        refunded = self.charges.get(str(event.get("refunded")))
        if refunded:
            refunded.pop()

    def _on_restart_scheduled(self, event: Mapping[str, Any], _: FoldedAttempt, __: float) -> None:
        charges = self.charges.get(str(event.get("budget")))
        if charges is not None and "time" in event:
            charges.append(record_wall(event))

    def _on_collateral_counted(self, event: Mapping[str, Any], draft: FoldedAttempt, at_s: float) -> None:
        by_node = event.get("by_node")
        for node, count in by_node.items() if isinstance(by_node, Mapping) else ():
            if optional_int(count):
                draft.collateral_counted.append(CollateralCount(draft.number, str(node), count, at_s))

    def _on_exit_timer_started(self, event: Mapping[str, Any], draft: FoldedAttempt, at_s: float) -> None:
        draft.exit_timer = event
        draft.exit_timer_s = at_s

    def _on_exit_hang_spared(self, event: Mapping[str, Any], draft: FoldedAttempt, _: float) -> None:
        draft.exit_spared = event

    def _on_exit_hung_killed(self, event: Mapping[str, Any], draft: FoldedAttempt, _: float) -> None:
        judged = event.get("judged")  # journals before it only had declared_finished
        if isinstance(judged, Mapping):
            draft.exit_judged.update((str(r), j) for r, j in judged.items() if isinstance(j, Mapping))

    def _on_preemption_noticed(self, event: Mapping[str, Any], draft: FoldedAttempt, _: float) -> None:
        if draft.notice is None:  # the first one decided; a later one changed nothing
            draft.notice = event

    def _on_workers_stopped(self, event: Mapping[str, Any], draft: FoldedAttempt, at_s: float) -> None:
        draft.checkpoint_step = optional_int(event.get("checkpoint_step"))
        draft.reformed_as = optional_int(event.get("reformed_as"))
        draft.stopped = True
        draft.ended_s = at_s
        killed = event.get("killed_at_grace")
        if isinstance(killed, list):
            draft.killed_at_grace = [k for k in killed if isinstance(k, Mapping)]
            draft.killed_at_grace_count = optional_int(event.get("killed_at_grace_count")) or len(killed)
        warning = event.get("rerun_warning")
        draft.rerun_warning = warning if isinstance(warning, str) else None
        for save in _saves(event.get("checkpoint_saves_s_ago"), at_s):  # a save listed twice counts once
            if all(abs(save[1] - committed) > _SAME_SAVE_S for _, committed in self.checkpoint_saves):
                self.checkpoint_saves.append(save)
        streak = optional_int(event.get("no_progress_streak"))
        if streak is not None:  # version 2: the controller's count, journaled as it decided
            self.no_progress_streak = streak
        if event.get("reason") == DRIVER_DIED:
            self._driver_died(event, draft)

    def _driver_died(self, event: Mapping[str, Any], draft: FoldedAttempt) -> None:
        """The attempt a driver died in, journaled by the driver that took over: the highest step
        its ranks were last seen at (the dead driver's ``state.json``, the ranks' logs), placed in
        time, carries its running on to then (never past the takeover)."""
        draft.driver_died = True
        # Its ranks ended with its driver, sometime before the takeover: at its last record as far
        # as is known (the span below may carry it on).
        draft.ended_s = max((span.end_s for span in draft.spans), default=draft.ended_s)
        step, seen_at = optional_int(event.get("last_step")), event.get("last_step_at")
        if step is None or not isinstance(seen_at, str) or self.origin is None:
            return
        try:
            at_s = (datetime.fromisoformat(seen_at) - self.origin).total_seconds()
        except (ValueError, TypeError):  # not a time, or one without its offset
            return
        running = [i for i, span in enumerate(draft.spans) if span.phase == "running"]
        if not running:
            return
        last = draft.spans[running[-1]]
        end = min(at_s, self.resumed_at_s[-1] if self.resumed_at_s else at_s)
        if end > last.end_s and running[-1] == len(draft.spans) - 1:
            draft.spans[-1] = Span("running", last.start_s, end)
            draft.ended_s = end
        if not draft.step_marks or step > max(s for _, s in draft.step_marks):
            draft.step_marks.append((max(last.start_s, min(end, draft.spans[running[-1]].end_s)), step))
            draft.steps_placed_when_seen = True  # dated by its write, as a seen_s_ago dates a step_reached

    def _on_checkpoint_note(self, event: Mapping[str, Any], _: FoldedAttempt, __: float) -> None:
        self.checkpoint_notes.append(event)

    def _on_node_verdict(self, event: Mapping[str, Any], _: FoldedAttempt, __: float) -> None:
        self.node_verdicts.append(event)

    @property
    def excluded_nodes(self) -> list[dict[str, Any]]:
        """``{"node", "reason", "attempt"}`` of each node left out of later attempts, in order, and
        ``output`` for one whose ``--preflight`` failed."""
        return [{"node": e.get("node"), "reason": e.get("reason"), "attempt": e.get("attempt"),
                 **({"output": list(e["output"])} if e.get("output") else {})}  # a --preflight's last lines
                for e in self.node_verdicts if e.get("event") == "node_excluded"]

    def _on_cache_replaced(self, event: Mapping[str, Any], _: FoldedAttempt, __: float) -> None:
        if self.cache_replaced is None:  # once a run, a resumed driver's too
            self.cache_replaced = event

    def _on_run_finished(self, event: Mapping[str, Any], _: FoldedAttempt, __: float) -> None:
        check_root_cause(event)  # read later, by status and the report
        self.finished = event

    # -- what the run amounts to ---------------------------------------------------------

    def open_span(self, until_s: float | None = None) -> Span | None:
        """The phase still open (to the last record, or to ``until_s``)."""
        end = self.now_s if until_s is None else until_s
        if self.phase == "done" or end <= self._since:
            return None
        return Span(self.phase, self._since, end)

    def closed(self, until_s: float | None = None) -> list[FoldedAttempt]:
        """The attempts in order, the open phase closed at the last record (or ``until_s``),
        leaving out numbers no record spoke of but in passing."""
        attempts = {n: _copy(a) for n, a in self.attempts.items()}
        span = self.open_span(until_s)
        if span is not None:
            target = attempts.setdefault(self.current, FoldedAttempt(self.current))
            target.spans.extend(split_backoff(span, self._backoff))
        return [a for _, a in sorted(attempts.items()) if a.spans or a.started or a.failures]

    @property
    def outcome(self) -> str | None:
        return None if self.finished is None else str(self.finished.get("outcome"))

    @staticmethod
    def tracks_checkpoints(attempts: Sequence[FoldedAttempt]) -> bool:
        return any(a.checkpoint_step is not None or a.resume_step is not None for a in attempts)

    def productive_flags(self, attempts: Sequence[FoldedAttempt]) -> list[bool]:
        tracks = self.tracks_checkpoints(attempts)
        return [
            productive(
                tracks_checkpoints=tracks,
                resume_step=a.resume_step,
                checkpoint_step=a.checkpoint_step,
                ended_run_in_success=self.outcome == "succeeded" and a is attempts[-1],
            )
            for a in attempts
        ]

    def since_start(self, wall: float) -> float:
        """Seconds since the run started, of a wall-clock time (epoch seconds)."""
        return 0.0 if self.origin is None else wall - self.origin.timestamp()

    def wall(self, at_s: float) -> datetime:
        """The wall time of seconds since the run started."""
        assert self.origin is not None
        return self.origin + timedelta(seconds=at_s)

    def run_root_cause(self, attempts: Sequence[FoldedAttempt]) -> FailureMark | None:
        """The failure ``run_finished`` names, as the attempt that had it recorded it (log tail included)."""
        cause = (self.finished or {}).get("root_cause")
        if not isinstance(cause, Mapping):
            return None
        named = failure_from(cause)
        for attempt in attempts:
            if attempt.number == named.attempt:
                for failure in attempt.effective_failures():
                    if (failure.rank, failure.kind, failure.node) == (named.rank, named.kind, named.node):
                        return failure
        return named

    def interrupted(self) -> FoldedAttempt | None:
        """The last attempt if it started and its drain was never journaled (its driver died)."""
        if self.last_started is None:
            return None
        last = self.attempts[int(self.last_started.get("attempt", 0))]
        return None if last.stopped else last


_HANDLERS = {
    "run_started": RunFold._on_run_started,
    "phase_changed": RunFold._on_phase_changed,
    "backoff_started": RunFold._on_backoff_started,
    "sign_of_life_seen": RunFold._on_sign_of_life_seen,
    "first_step_seen": RunFold._on_first_step_seen,
    "step_reached": RunFold._on_step_reached,
    "attempt_adopted": RunFold._on_attempt_adopted,
    "startup_profiled": RunFold._on_startup_profiled,
    "ranks_started": RunFold._on_ranks_started,
    "rank_pids": RunFold._on_rank_pids,
    "straggler_seen": RunFold._on_straggler_seen,
    "attempt_started": RunFold._on_attempt_started,
    "worker_exited": RunFold._on_worker_exited,
    "worker_failed": RunFold._on_worker_failed,
    "root_cause_revised": RunFold._on_root_cause_revised,
    "restart_scheduled": RunFold._on_restart_scheduled,
    "collateral_counted": RunFold._on_collateral_counted,
    "exit_timer_started": RunFold._on_exit_timer_started,
    "exit_hang_spared": RunFold._on_exit_hang_spared,
    "exit_hung_killed": RunFold._on_exit_hung_killed,
    "preemption_noticed": RunFold._on_preemption_noticed,
    "workers_stopped": RunFold._on_workers_stopped,
    "checkpoint_rejected": RunFold._on_checkpoint_note,
    "checkpoints_unrecognised": RunFold._on_checkpoint_note,
    "compile_cache_replaced": RunFold._on_cache_replaced,
    "node_excluded": RunFold._on_node_verdict,
    "node_kept": RunFold._on_node_verdict,
    "run_finished": RunFold._on_run_finished,
}


def _process_age_s(event: Mapping[str, Any]) -> float:
    """How long before the run's first record its launcher process started (0 when not said)."""
    ago = event.get("process_started_s_ago")
    if event.get("event") != "run_started" or not isinstance(ago, (int, float)) or isinstance(ago, bool):
        return 0.0
    return ago if 0.0 <= ago < math.inf else 0.0


def _saves(listed: Any, at_s: float) -> list[tuple[float, float]]:
    """A ``workers_stopped``'s checkpoint saves, (began, committed) seconds before it, since the run started."""
    if not isinstance(listed, list):
        return []
    saves = []
    for save in listed:
        if isinstance(save, list) and len(save) == 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in save
        ) and save[0] >= save[1]:
            saves.append((at_s - float(save[0]), at_s - float(save[1])))
    return saves


def _placed_step(event: Mapping[str, Any]) -> int:
    """The step a step record's time is of: its ``step``, or for a first step read with later ones
    (``read_to_step``) the last of them, whose write the node dated them all by."""
    step = int(event["step"])
    read_to = optional_int(event.get("read_to_step"))
    return read_to if read_to is not None and read_to > step else step


def _seen_at_s(event: Mapping[str, Any], at_s: float, attempt: FoldedAttempt) -> float:
    """When a step record's step was seen: its time less its ``seen_s_ago`` (a drain's record is
    written after the step was seen), never before the attempt's mark before it."""
    ago = event.get("seen_s_ago")
    if not isinstance(ago, (int, float)) or isinstance(ago, bool) or not 0 < ago < math.inf:
        return at_s
    floor = max((at for at, _ in attempt.step_marks), default=0.0)
    return max(at_s - float(ago), min(floor, at_s))


def fold(events: Iterable[Mapping[str, Any]], *, strict_times: bool = True) -> RunFold:
    """Fold a whole journal, in order."""
    state = RunFold(strict_times=strict_times)
    for event in events:
        state.apply(event)
    return state


# -- helpers -------------------------------------------------------------------------------


def _copy(attempt: FoldedAttempt) -> FoldedAttempt:
    copy = FoldedAttempt(**{**attempt.__dict__})
    copy.spans = list(attempt.spans)
    copy.step_marks = list(attempt.step_marks)
    copy.stragglers = list(attempt.stragglers)
    copy.exit_judged = dict(attempt.exit_judged)
    copy.exited_0 = set(attempt.exited_0)
    return copy
