"""What a rank's end means, judged on evidence: finished (hung at exit after its work) or stopped
from outside (exit 0 after a preemption signal). Pure rules; the controller's use of them is in
controller/test_exit_hang.py and controller/test_preempted_exit_rules.py."""

from __future__ import annotations

import json
import signal

import pytest

from elastic.core.evidence import read_account
from elastic.core.rank_ends import (
    FinishEvidence,
    HungRank,
    StopSign,
    judge_finished,
    rerun_warning,
    stop_sign_in,
    stop_sign_in_lines,
    trained_after_stop,
)

AT_EXIT = "in the at-exit handler or finalizer never_returns (site.py:5)"


@pytest.mark.parametrize(
    ("seen", "peer_exited_s", "evidence"),
    [
        (HungRank(1, declared_done=True), None, FinishEvidence.DECLARED),
        (HungRank(1, declared_done=True, error="ValueError: x"), None, FinishEvidence.DECLARED),
        (HungRank(1, at_exit=AT_EXIT), None, FinishEvidence.AT_EXIT),
        (HungRank(1, at_exit="no Python frame left", silent_s=1.0, checkpoint_s=9.0), 5.0, FinishEvidence.AT_EXIT),
        # An uncaught error before the hang: the interpreter is exiting, but the work did not end well.
        (HungRank(1, at_exit=AT_EXIT, error="RuntimeError: boom"), None, None),
        # The checkpoint was written 9 s ago, the peer exited 5 s ago, the rank silent 12 s: quiet.
        (HungRank(1, silent_s=12.0, checkpoint_s=9.0), 5.0, FinishEvidence.QUIET),
        (HungRank(1, silent_s=9.0, checkpoint_s=9.0), 5.0, FinishEvidence.QUIET),
        (HungRank(1, silent_s=12.0, checkpoint_s=9.0, error="KeyError: 'x'"), 5.0, None),
        # It printed after the checkpoint (8 s ago, the checkpoint 9 s ago): no evidence.
        (HungRank(1, silent_s=8.0, checkpoint_s=9.0), 5.0, None),
        # The last checkpoint write came after the peer's exit 0: no evidence.
        (HungRank(1, silent_s=12.0, checkpoint_s=3.0), 5.0, None),
        (HungRank(1, silent_s=12.0, checkpoint_s=None), 5.0, None),
        (HungRank(1, silent_s=12.0, checkpoint_s=9.0), None, None),
        # Quiet, but its stack was read and shows it at work in its own code (an upload at the end).
        (HungRank(1, frame="is in upload (train.py:52)", at_work=True, silent_s=12.0, checkpoint_s=9.0), 5.0, None),
        # Quiet, its stack in a process group's destructor under the script's last line: its way out.
        (HungRank(1, frame="is in c10d::ProcessGroupGloo::~ProcessGroupGloo", silent_s=12.0, checkpoint_s=9.0), 5.0,
         FinishEvidence.QUIET),
        # Its stack shows it still in the script and nothing else: no evidence.
        (HungRank(1, frame="is in evaluate (train.py:40)", silent_s=2.0, checkpoint_s=9.0), 5.0, None),
        (HungRank(1), 5.0, None),
    ],
)
def test_a_rank_hung_at_exit_is_finished_only_on_evidence(
    seen: HungRank, peer_exited_s: float | None, evidence: FinishEvidence | None
) -> None:
    """The strongest evidence wins; an uncaught error refutes all but the rank's own word."""
    judged = judge_finished(seen, peer_exited_s=peer_exited_s)
    assert evidence == (None if judged is None else judged.evidence)


def test_quiet_is_no_proof_when_the_newest_save_was_torn() -> None:
    """The last write its peers exited 0 after was a checkpoint rejected as not whole."""
    quiet = HungRank(1, silent_s=12.0, checkpoint_s=9.0)
    assert judge_finished(quiet, peer_exited_s=5.0) is not None
    assert judge_finished(quiet, peer_exited_s=5.0, incomplete_checkpoint="ckpt_20.pt: torn zip") is None


def test_the_judgement_says_why_in_words() -> None:
    """The summary quotes these."""
    assert "its main thread was at interpreter exit (in the at-exit handler or finalizer never_returns (site.py:5))" == (
        judge_finished(HungRank(1, at_exit=AT_EXIT), peer_exited_s=None).why  # type: ignore[union-attr]
    )
    quiet = judge_finished(HungRank(1, silent_s=12.0, checkpoint_s=9.0), peer_exited_s=5.0)
    assert quiet is not None
    assert "its peers exited 0 after the last checkpoint write (9.0 s before) and it printed nothing since (12.0 s)" == quiet.why


def test_a_restart_from_a_checkpoint_holding_the_last_step_warns() -> None:
    """The checkpoint holds the last step reached: the next attempt may train the job's end again."""
    assert rerun_warning(0, 20, 20) == (
        "restarted from checkpoint step 20, which holds the last step attempt 0 reached (20): "
        "if the job had finished, it may be trained again"
    )
    assert rerun_warning(0, 21, 20) is not None
    assert rerun_warning(0, 10, 20) is None
    assert rerun_warning(0, None, 20) is None
    assert rerun_warning(0, 20, None) is None


def _line(**entry: object) -> str:
    return json.dumps({"time": NOW - 5.0, **entry}) + "\n"


NOW = 1_000_000.0


@pytest.mark.parametrize(
    ("text", "sign"),
    [
        (_line(signal=15, name="SIGTERM", handler="save (train.py:12)", at_exit=False),
         StopSign(signal.SIGTERM, "caught SIGTERM in its handler save (train.py:12)")),
        (_line(signal=10, name="SIGUSR1", at_exit=False), StopSign(signal.SIGUSR1, "caught SIGUSR1")),
        (_line(preemption_sync=194), StopSign(signal.SIGTERM, "reached JAX's preemption sync point at step 194")),
        # Caught while the interpreter was exiting: the work was done.
        (_line(signal=15, name="SIGTERM", at_exit=True), None),
        (_line(signal=15, name="SIGTERM", at_exit=True) + _line(preemption_sync=3),
         StopSign(signal.SIGTERM, "reached JAX's preemption sync point at step 3")),
        ('{"signal": 15, "na' + "\n" + _line(signal=2, name="SIGINT", at_exit=False),
         StopSign(signal.SIGINT, "caught SIGINT")),
        ("", None),
        (_line(signal=True, at_exit=False) + "[1, 2]\n", None),
        # A handler that ran long before the exit (logrotate's SIGHUP an hour before): no stop.
        (_line(signal=1, name="SIGHUP", at_exit=False, time=NOW - 3600.0), None),
        # The latest catch of a signal counts: caught an hour ago, and again just now.
        (_line(signal=1, name="SIGHUP", at_exit=False, time=NOW - 3600.0) + _line(signal=1, name="SIGHUP", at_exit=False),
         StopSign(signal.SIGHUP, "caught SIGHUP")),
    ],
)
def test_the_signals_file_says_what_stopped_the_rank(text: str, sign: StopSign | None) -> None:
    assert sign == stop_sign_in(read_account(text, now=NOW))


def test_a_rank_that_trained_on_after_its_handler_ran_was_not_stopped() -> None:
    """A progress dump on SIGUSR1, then 40 more steps and a clean exit: a handler that merely ran.
    One step after it (a handler that sets a flag) is still a stop; no steps known says nothing."""
    account = read_account(_line(signal=10, name="SIGUSR1", at_exit=False, time=NOW - 30.0), now=NOW)
    assert "it trained 40 steps after it caught SIGUSR1 30 s before its exit" == trained_after_stop(
        account, lambda age_s: 40)
    assert trained_after_stop(account, lambda age_s: 1) is None
    assert trained_after_stop(account, lambda age_s: None) is None
    sync = read_account(_line(preemption_sync=7), now=NOW)
    assert trained_after_stop(sync, lambda age_s: 40) is None


@pytest.mark.parametrize(
    ("lines", "sign"),
    [
        (["I1205 train.py:99] Training stopped: Job received termination signal (SIGTERM).", "shutdown"],
         StopSign(signal.SIGTERM,
                  "printed MaxText's 'Training stopped: Job received termination signal (SIGTERM)'")),
        (["W1205 multihost.py:436] [process=0][thread=MainThread] Reached preemption sync point, step=12"],
         StopSign(signal.SIGTERM, "printed Orbax's 'Reached preemption sync point, step=12'")),
        (["completed step: 39", "Training completed"], None),
    ],
)
def test_a_frameworks_stop_line_is_the_fallback(lines: list[str], sign: StopSign | None) -> None:
    assert sign == stop_sign_in_lines(lines)
