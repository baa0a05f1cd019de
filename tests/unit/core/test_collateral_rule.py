"""A failure's survivor that will not exit on the stop signal is killed at once unless a
checkpoint write is under way, and one whose own handler caught it keeps its grace: the rule,
its journal fields and its words."""

from __future__ import annotations

import signal

import pytest

from elastic.core.controller.controller import Controller, ControllerSettings
from elastic.core.failures import (
    RECENT_WRITE_S, CheckpointWrite, Collateral, Disposition, GraceKill, WorkerExit, describe_grace_kills,
    exits_in_handler, grace_kill_from, never_exits_on,
)
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, PreemptionNoticed, RunStarted, StopRequested, StopWorkers, WorkerExited,
)
from elastic.core.policy.restarts import RestartPolicy

QUIET = CheckpointWrite(directory=True, written_s=60.0)


@pytest.mark.parametrize(
    ("seen", "collateral"),
    [
        (CheckpointWrite(directory=False), Collateral.UNSEEN),
        (CheckpointWrite(directory=False, written_s=0.0, open_for_write=True), Collateral.UNSEEN),
        (CheckpointWrite(directory=True), Collateral.AT_ONCE),  # an empty or missing directory
        (QUIET, Collateral.AT_ONCE),
        (CheckpointWrite(directory=True, written_s=RECENT_WRITE_S), Collateral.AT_ONCE),
        (CheckpointWrite(directory=True, written_s=RECENT_WRITE_S / 2), Collateral.WRITING),
        (CheckpointWrite(directory=True, written_s=0.0), Collateral.WRITING),
        (CheckpointWrite(directory=True, written_s=60.0, open_for_write=True), Collateral.WRITING),
        (CheckpointWrite(directory=True, open_for_write=True), Collateral.WRITING),
    ],
)
def test_a_survivor_may_be_killed_at_once_only_when_a_write_could_be_seen_and_none_was(
    seen: CheckpointWrite, collateral: Collateral
) -> None:
    """No directory: nothing can be ruled out. A file open for writing, or a write within
    RECENT_WRITE_S: a write under way. Otherwise: at once."""
    assert collateral == seen.collateral


@pytest.mark.parametrize(
    ("signum", "disposition", "jax", "never"),
    [
        (signal.SIGTERM, Disposition.IGNORED, False, True),
        (signal.SIGINT, Disposition.IGNORED, False, True),
        (signal.SIGTERM, Disposition.CAUGHT, True, True),  # JAX's preemption service
        (signal.SIGTERM, Disposition.IGNORED, True, True),
        (signal.SIGINT, Disposition.CAUGHT, True, False),  # JAX's service takes SIGTERM only
        (signal.SIGTERM, Disposition.CAUGHT, False, False),  # a handler may yet exit
        (signal.SIGTERM, Disposition.BLOCKED, False, False),  # may be unblocked
        (signal.SIGTERM, Disposition.DEFAULT, False, False),
        (signal.SIGTERM, Disposition.UNKNOWN, True, False),
    ],
)
def test_which_survivors_clearly_never_exit_on_the_signal(
    signum: int, disposition: Disposition, jax: bool, never: bool
) -> None:
    """Killed without the short window: those that ignore the signal, and JAX's on SIGTERM."""
    assert never == never_exits_on(signum, disposition, jax)
    assert never == GraceKill(signum, 5.0, disposition, jax=jax).never_exits


@pytest.mark.parametrize(
    ("disposition", "jax", "own_handler", "never", "in_handler"),
    [
        # A Python handler of the rank's own, or a shell's trap: its exit may be under way.
        (Disposition.CAUGHT, False, True, False, True),
        (Disposition.CAUGHT, False, False, False, True),  # a handler nobody wrote down: nothing says it is not the user's
        # JAX's service holds SIGTERM, unless the rank's own handler does: which, /proc cannot say.
        (Disposition.CAUGHT, True, False, True, False),
        (Disposition.CAUGHT, True, True, False, True),
        # No handler runs: nothing to wait for.
        (Disposition.IGNORED, False, True, True, False),  # its own handler, since set to SIG_IGN
        (Disposition.IGNORED, True, True, True, False),
        (Disposition.BLOCKED, False, True, False, False),
        (Disposition.DEFAULT, False, True, False, False),
        (Disposition.DEFAULT, True, False, False, False),
        (Disposition.UNKNOWN, False, False, False, False),
    ],
)
def test_a_survivor_whose_own_handler_caught_sigterm_keeps_its_grace(
    disposition: Disposition, jax: bool, own_handler: bool, never: bool, in_handler: bool
) -> None:
    """Killed at once only when it ignores the signal or a handler not the user's holds it (JAX's
    preemption service); a handler that may be the user's gets the grace; one in no handler at
    all (blocked, the default action yet alive) gets the short window."""
    kill = GraceKill(signal.SIGTERM, 5.0, disposition, jax=jax, own_handler=own_handler)
    assert (never, in_handler) == (kill.never_exits, kill.in_handler)
    assert never == never_exits_on(signal.SIGTERM, disposition, jax, own_handler)
    assert in_handler == exits_in_handler(signal.SIGTERM, disposition, jax, own_handler)
    assert not (kill.never_exits and kill.in_handler)


def test_jaxs_service_takes_only_sigterm_so_a_jax_rank_catching_another_signal_keeps_its_grace() -> None:
    assert exits_in_handler(signal.SIGINT, Disposition.CAUGHT, jax=True)


@pytest.mark.parametrize("disposition", list(Disposition))
@pytest.mark.parametrize("jax", [False, True])
def test_a_survivor_whose_own_handler_ran_on_the_signal_keeps_its_grace_however_it_holds_it_now(
    disposition: Disposition, jax: bool
) -> None:
    """A handler may set SIG_IGN to finish its exit undisturbed, and Python puts the default
    action back as it finalizes: once the rank's own handler ran, its exit is under way."""
    kill = GraceKill(signal.SIGTERM, 5.0, disposition, jax=jax, own_handler=True, handler_ran=True)
    assert (False, True) == (kill.never_exits, kill.in_handler)


def _kill(collateral: Collateral | None, write: CheckpointWrite | None, waited_s: float | None = None,
          disposition: Disposition = Disposition.IGNORED, jax: bool = False, own_handler: bool = False,
          handler_ran: bool = False) -> GraceKill:
    return GraceKill(signal.SIGTERM, 5.0, disposition, jax=jax, collateral=collateral, waited_s=waited_s, write=write,
                     own_handler=own_handler, handler_ran=handler_ran)


@pytest.mark.parametrize(
    ("kill", "line"),
    [
        (_kill(Collateral.AT_ONCE, QUIET, 0.0),
         "rank 0 ignored SIGTERM; killed at once, not after 5 s (--failure-grace): no checkpoint write was under way"),
        (_kill(Collateral.AT_ONCE, QUIET, 0.0, Disposition.CAUGHT, jax=True),
         "rank 0 ignored SIGTERM (JAX's preemption service catches it); killed at once, not after 5 s "
         "(--failure-grace): no checkpoint write was under way"),
        (_kill(Collateral.AT_ONCE, QUIET, 0.05, Disposition.CAUGHT),
         "rank 0 caught SIGTERM but did not exit; killed after 0.05 s, not after 5 s (--failure-grace): "
         "no checkpoint write was under way"),
        (_kill(Collateral.WRITING, CheckpointWrite(True, 40.0, open_for_write=True)),
         "rank 0 ignored SIGTERM; killed after 5 s (--failure-grace): a checkpoint write was under way "
         "(a file in the checkpoint directory open for writing)"),
        (_kill(Collateral.WRITING, CheckpointWrite(True, 0.25)),
         "rank 0 ignored SIGTERM; killed after 5 s (--failure-grace): a checkpoint write was under way "
         "(the checkpoint directory written 0.25 s before)"),
        (_kill(Collateral.UNSEEN, CheckpointWrite(False)),
         "rank 0 ignored SIGTERM; killed after 5 s (--failure-grace): no --checkpoint-dir to see a "
         "checkpoint write in"),
        (_kill(Collateral.HANDLER, None, None, Disposition.CAUGHT, own_handler=True),
         "rank 0 caught SIGTERM but did not exit; killed after 5 s (--failure-grace): a rank whose own handler "
         "caught SIGTERM has the whole grace to exit"),
        (_kill(Collateral.HANDLER, QUIET, None, Disposition.CAUGHT, jax=True, own_handler=True),
         "rank 0 caught SIGTERM but did not exit (its own handler, or JAX's preemption service set after it); "
         "killed after 5 s (--failure-grace): a rank whose own handler caught SIGTERM has the whole grace to exit"),
        (_kill(Collateral.HANDLER, None, None, Disposition.DEFAULT, jax=True, own_handler=True, handler_ran=True),
         "rank 0 caught SIGTERM in its own handler but did not exit; killed after 5 s (--failure-grace): a rank "
         "whose own handler caught SIGTERM has the whole grace to exit"),
        (_kill(None, None), "rank 0 ignored SIGTERM; killed after 5 s (--failure-grace)"),
    ],
)
def test_the_summary_says_how_each_survivor_was_killed_and_why(kill: GraceKill, line: str) -> None:
    """At once (or after the short window) and why it could be, or after the grace and why it waited."""
    assert [line] == describe_grace_kills([(0, kill)], "--failure-grace")


def test_survivors_killed_the_same_way_share_a_line_and_the_others_get_their_own() -> None:
    at_once = _kill(Collateral.AT_ONCE, QUIET, 0.0)
    windowed = _kill(Collateral.AT_ONCE, QUIET, 0.05)
    assert [
        "ranks 0, 2 ignored SIGTERM; killed at once, not after 5 s: no checkpoint write was under way",
        "rank 1 ignored SIGTERM; killed after 0.05 s, not after 5 s: no checkpoint write was under way",
    ] == describe_grace_kills([(0, at_once), (1, windowed), (2, at_once)])


@pytest.mark.parametrize(
    "kill",
    [
        _kill(Collateral.AT_ONCE, QUIET, 0.0, Disposition.CAUGHT, jax=True),
        _kill(Collateral.WRITING, CheckpointWrite(True, 0.3, open_for_write=True)),
        _kill(Collateral.UNSEEN, CheckpointWrite(False)),
        _kill(Collateral.HANDLER, None, None, Disposition.CAUGHT, own_handler=True),
        _kill(Collateral.HANDLER, QUIET, None, Disposition.CAUGHT, jax=True, own_handler=True),
        _kill(Collateral.HANDLER, None, None, Disposition.IGNORED, own_handler=True, handler_ran=True),
        _kill(None, None),
    ],
)
def test_a_grace_kill_reads_back_from_its_journal_fields(kill: GraceKill) -> None:
    """What the node saw and did goes into workers_stopped and comes back the same."""
    assert kill == grace_kill_from(kill.fields(0, "n0"))


def test_a_grace_kill_of_an_older_journal_or_a_later_word_reads_as_a_whole_graces() -> None:
    """No collateral field (a journal from before) or a word this version does not know."""
    old = {"rank": 0, "signal": "SIGTERM", "grace_s": 5.0, "disposition": "ignored", "jax": False, "state": "S"}
    assert GraceKill(signal.SIGTERM, 5.0, Disposition.IGNORED, state="S") == grace_kill_from(old)
    later = grace_kill_from({**old, "collateral": "deferred", "waited_s": "soon"})
    assert (None, None) == (later.collateral, later.waited_s)


def _running() -> Controller:
    c = Controller(RestartPolicy.create(max_restarts=1), ControllerSettings(grace_s=30.0, failure_grace_s=2.0))
    for observation in (RunStarted(0.0), AttemptPlanned(0, 2, 0.1), AttemptLaunched(0, 2, 0.2)):
        c.handle(observation)
    return c


def test_only_a_failures_drain_stops_its_ranks_as_collateral() -> None:
    """A failure: collateral. A stop of the launcher or a preemption notice lets ranks save: not."""
    failed = _running().handle(WorkerExited(WorkerExit(0, 1, "n0", 3, 1.0)))
    assert (StopWorkers(0, signal.SIGTERM, 2.0, collateral=True),) == failed.commands
    stopped = _running().handle(StopRequested(signal.SIGTERM, 1.0))
    assert (StopWorkers(0, signal.SIGTERM, 30.0, collateral=False),) == stopped.commands
    noticed = _running().handle(PreemptionNoticed("signal SIGUSR1", 1.0))
    [stop] = [c for c in noticed.commands if isinstance(c, StopWorkers)]
    assert not stop.collateral


@pytest.mark.parametrize(
    ("seen", "quiet_in_s"),
    [
        (CheckpointWrite(directory=True, written_s=0.25), RECENT_WRITE_S - 0.25),
        (CheckpointWrite(directory=True, written_s=0.0), RECENT_WRITE_S),
        (CheckpointWrite(directory=True, written_s=0.25, open_for_write=True), None),  # a write, for sure
        (CheckpointWrite(directory=True, written_s=RECENT_WRITE_S), None),  # over already
        (CheckpointWrite(directory=True), None),
        (CheckpointWrite(directory=False, written_s=0.25), None),
    ],
)
def test_a_write_seen_only_by_its_time_is_looked_at_again_once_it_would_be_over(
    seen: CheckpointWrite, quiet_in_s: float | None
) -> None:
    """A save that just ended and one between two files look alike; a second look tells them apart."""
    assert quiet_in_s == seen.quiet_in_s
