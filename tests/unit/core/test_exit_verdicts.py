"""An exit's verdict, its rules tested together: table-driven on the cases that were wrong, and
property-based (hypothesis) over combinations of evidence, each property one promise the verdict
keeps whatever else the evidence says (docs/failures/verdicts.md)."""

from __future__ import annotations

import json
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic.core.controller.attempts import AttemptSteps
from elastic.core.evidence import read_account
from elastic.core.failures import FailureKind, WorkerExit
from elastic.core.messages import RankStep
from elastic.core.rank_ends import FinishEvidence, HungRank, StopSign, judge_finished
from elastic.core.verdicts import ExitContext, judge_exit

NOW = 1_000.0
TRACEBACK = ("[rank1]: Traceback (most recent call last):", '[rank1]:   File "train.py", line 9, in <module>',
             "[rank1]: OSError: [Errno 28] No space left on device")
CRASH = (-signal.SIGSEGV, -signal.SIGABRT, 128 + signal.SIGSEGV)


def account(age_s: float) -> str:
    return json.dumps({"signal": 15, "name": "SIGTERM", "handler": "save (t.py:3)", "at_exit": False,
                       "time": NOW - age_s})


def an_exit(returncode: int, *, stop_age_s: float | None = None, done: bool = False, tail: tuple[str, ...] = (),
            uncaught: str | None = None, launch_error: str | None = None) -> WorkerExit:
    text = "" if stop_age_s is None else account(stop_age_s)
    if uncaught:
        text += "\n" + json.dumps({"uncaught": uncaught, "time": NOW})
    seen = read_account(text, now=NOW) if text else None
    stop = None if stop_age_s is None else StopSign(signal.SIGTERM, "caught SIGTERM in its handler save (t.py:3)")
    return WorkerExit(0, 1, "n", returncode, observed_at=NOW, log_tail=tail, stopped_by=stop, declared_done=done,
                      account=seen, launch_error=launch_error)


def steps_since(reports: list[tuple[float, int]]) -> ExitContext:
    """The context of rank 1's exit at NOW with its step reports as the controller keeps them."""
    steps = AttemptSteps()
    for at, step in reports:
        steps.saw([RankStep(1, step, "output", at)])
    return ExitContext(steps_since=lambda age_s: steps.since(1, NOW - age_s))


# Ten steps a second, a report a second, for a minute; the catch 1.5 s before the exit, then the
# step under way (one more) and a save: counted from a report before the catch, a success.
STOPPED_AT_ONCE = [(NOW - 60 + t, 10 * t) for t in range(58)] + [(NOW - 1.0, 10 * 57 + 6)]


@pytest.mark.parametrize(("exit", "context", "kind", "why"), [
    # Stopped one step after its catch, steps reported every second before it: preempted.
    (an_exit(0, stop_age_s=1.5), steps_since(STOPPED_AT_ONCE), FailureKind.PREEMPTED, None),
    # Caught after its last step report (it printed no step since): nothing says it trained on.
    (an_exit(0, stop_age_s=0.5), steps_since(STOPPED_AT_ONCE), FailureKind.PREEMPTED, None),
    # Trained on for 20 s after the catch: the handler merely ran.
    (an_exit(0, stop_age_s=20.0), steps_since(STOPPED_AT_ONCE), None, "not_stopped"),
    # A save on SIGTERM from outside, then exit 0: preempted.
    (an_exit(0, stop_age_s=3.0), ExitContext(steps_since=lambda age_s: 0), FailureKind.PREEMPTED, None),
    # The same catch, then 40 more steps: the handler merely ran; a success.
    (an_exit(0, stop_age_s=30.0), ExitContext(steps_since=lambda age_s: 40), None, "not_stopped"),
    # The launcher's own drain sent it: only an exit 0.
    (an_exit(0, stop_age_s=1.0), ExitContext(stop_sent=True), None, None),
    # Said it was done, then crashed on its way out: finished.
    (an_exit(-signal.SIGSEGV, done=True), ExitContext(), None, "finished"),
    # Crashed 1 s after a peer's exit 0 with --exit-hang succeed: finished; without it, crashed.
    (an_exit(-signal.SIGSEGV), ExitContext(peer_exit_0_at=NOW - 1, exit_timeout_s=5, exit_hang_succeeds=True),
     None, "finished"),
    (an_exit(-signal.SIGSEGV), ExitContext(peer_exit_0_at=NOW - 1, exit_timeout_s=5), FailureKind.CRASHED, None),
    # A torch-prefixed traceback and exit 1: exited, whatever came before.
    (an_exit(1, tail=TRACEBACK), ExitContext(), FailureKind.EXITED, None),
    (an_exit(1, tail=TRACEBACK), ExitContext(failure_seen=True), FailureKind.COLLATERAL, None),
    (an_exit(1, launch_error="not found"), ExitContext(stop_sent=True), FailureKind.LAUNCH_FAILED, None),
])
def test_the_cases_that_were_wrong_get_their_verdict(
    exit: WorkerExit, context: ExitContext, kind: FailureKind | None, why: str | None
) -> None:
    verdict = judge_exit(exit, context)
    assert kind == verdict.kind
    assert (why == "finished") == (verdict.finished is not None)
    assert (why == "not_stopped") == (verdict.not_stopped is not None)


returncodes = st.sampled_from([0, 1, 2, 137, -signal.SIGKILL, -signal.SIGTERM, *CRASH])
contexts = st.builds(
    ExitContext,
    stop_sent=st.booleans(), failure_seen=st.booleans(), done_seen=st.booleans(),
    peer_exit_0_at=st.one_of(st.none(), st.floats(NOW - 600, NOW)),
    exit_timeout_s=st.one_of(st.none(), st.floats(0.5, 300)), exit_hang_succeeds=st.booleans(),
    steps_since=st.one_of(st.none(), st.integers(0, 50).map(lambda n: (lambda age_s: n))),
)
exits = st.builds(
    an_exit, returncodes,
    stop_age_s=st.one_of(st.none(), st.floats(0, 7200)), done=st.booleans(),
    tail=st.sampled_from([(), TRACEBACK, ("step 9",)]),
    uncaught=st.one_of(st.none(), st.just("ValueError: bad")),
    launch_error=st.one_of(st.none(), st.just("not executable")),
)


@settings(max_examples=200, deadline=None)
@given(exit=exits, context=contexts)
def test_a_failed_exit_is_a_success_only_when_the_rank_said_it_was_done_or_crashed_after_a_peer_finished(
    exit: WorkerExit, context: ExitContext
) -> None:
    """No false success: an exit that is not 0 succeeds only on the rank's own word, or with
    --exit-hang succeed by a crash signal within --exit-timeout of a peer's exit 0."""
    verdict = judge_exit(exit, context)
    if verdict.succeeded and exit.returncode != 0:
        assert verdict.finished is not None
        assert exit.declared_done or (context.exit_hang_succeeds and exit.returncode in CRASH)


@settings(max_examples=200, deadline=None)
@given(exit=exits, context=contexts)
def test_preempted_means_a_clean_exit_told_to_stop_from_outside(exit: WorkerExit, context: ExitContext) -> None:
    """Preempted only for an exit 0 with a stop sign the launcher did not cause, the job not said
    done, and no sign the rank trained on after it."""
    verdict = judge_exit(exit, context)
    if verdict.kind is FailureKind.PREEMPTED:
        assert exit.returncode == 0 and exit.launch_error is None and verdict.exit.stopped_by is not None
        assert not (context.stop_sent or context.failure_seen or context.done_seen or exit.declared_done)
        assert verdict.not_stopped is None


@settings(max_examples=200, deadline=None)
@given(exit=exits, context=contexts)
def test_a_clean_exit_with_no_stop_is_a_success_and_a_launch_failure_never_is(
    exit: WorkerExit, context: ExitContext
) -> None:
    verdict = judge_exit(exit, context)
    if exit.launch_error is not None:
        assert FailureKind.LAUNCH_FAILED == verdict.kind
    elif exit.returncode == 0 and exit.stopped_by is None:
        assert verdict.succeeded and verdict.finished is None


@settings(max_examples=200, deadline=None)
@given(exit=exits, context=contexts)
def test_once_the_attempt_is_stopped_or_failed_every_failure_is_collateral(exit: WorkerExit, context: ExitContext) -> None:
    """After the launcher's stop or another rank's failure, an exit is a consequence: never a
    preemption, never a root-cause kind."""
    verdict = judge_exit(exit, context)
    if (context.stop_sent or context.failure_seen) and exit.launch_error is None:
        assert verdict.kind in (None, FailureKind.COLLATERAL)


hung_ranks = st.builds(
    HungRank, st.just(1),
    declared_done=st.booleans(),
    at_exit=st.one_of(st.none(), st.just("no Python frame left")),
    frame=st.one_of(st.none(), st.just("is in upload (train.py:52)"), st.just("is in c10d::ProcessGroupGloo::~ProcessGroupGloo")),
    silent_s=st.one_of(st.none(), st.floats(0, 100)),
    checkpoint_s=st.one_of(st.none(), st.floats(0, 100)),
    error=st.one_of(st.none(), st.just("OSError: [Errno 28] No space left on device")),
    at_work=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(seen=hung_ranks, peer_exited_s=st.one_of(st.none(), st.floats(0, 100)),
       incomplete=st.one_of(st.none(), st.just("ckpt_20.pt: torn zip")))
def test_a_rank_killed_at_exit_is_finished_only_on_evidence_an_error_or_work_never_outweighs(
    seen: HungRank, peer_exited_s: float | None, incomplete: str | None
) -> None:
    """Beside the exit rules, the exit-hang judgement: an uncaught error, a stack at work or a torn
    last save never leave quiet as proof; only the rank's own word outweighs an uncaught error."""
    finished = judge_finished(seen, peer_exited_s=peer_exited_s, incomplete_checkpoint=incomplete)
    if finished is None or seen.declared_done:
        return
    assert seen.error is None
    if finished.evidence is FinishEvidence.QUIET:
        assert not seen.at_work and incomplete is None and seen.at_exit is None
