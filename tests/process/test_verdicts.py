"""Verdicts that were easy to get wrong, with real ranks: each ends as ordinary scripts end, and the
run's outcome, root cause and signature are what happened (docs/failures/index.md: how a verdict
is reached). The pure rules are in tests/unit/core/test_evidence.py and test_rank_ends.py."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from harness import Finished, Launcher, per_rank, script, skip_unless_installed

from elastic.node.probes.stacks import find_py_spy

EXIT_TIMEOUT_S = 2


def ends_badly(launcher: Launcher, mode: str, *options: object, timeout_s: float = 90.0) -> Finished:
    return launcher.run("--nproc-per-node", 2, *options, command=script("ends_badly.py", mode), timeout_s=timeout_s)


def root_cause(finished: Finished, attempt: int = 0) -> dict[str, Any]:
    cause: dict[str, Any] = finished.report()["attempts"][attempt]["root_cause"]
    assert cause is not None, finished.explain()
    return cause


@pytest.mark.parametrize("bootstrap", ["on", "off"])
def test_a_torch_rank_that_raised_after_its_peer_finished_and_hung_in_teardown_fails_the_run(
    launcher: Launcher, bootstrap: str
) -> None:
    """Rank 0 exits 0; rank 1 raises OSError writing the final model, printed by torch's ``[rank1]:``
    excepthook, and hangs at exit. Not finished, whatever its stack shows: the run fails with the
    error named. Without the bootstrap the prefixed traceback itself is the evidence."""
    skip_unless_installed("torch")
    finished = ends_badly(launcher, "raise-then-hang", "--exit-timeout", EXIT_TIMEOUT_S, "--max-restarts", 0,
                          "--rank-bootstrap", bootstrap)

    assert 0 != finished.returncode, finished.explain()
    assert "[rank1]: OSError: [Errno 28] No space left on device" in finished.rank_log(0, 1)
    [killed] = finished.events("exit_hung_killed")
    judged = killed["judged"]["1"]
    assert (False, "OSError: [Errno 28] No space left on device") == (judged["finished"], judged["error"]), killed
    assert "failed" == finished.report()["outcome"]
    assert "exit-hung" == root_cause(finished)["kind"]


def test_a_traceback_followed_by_torchs_exit_warning_is_still_the_error_that_ended_the_rank(
    launcher: Launcher,
) -> None:
    """The ``destroy_process_group() was not called`` warning after a plain traceback is at-exit
    noise: the rank hung at exit after an uncaught ValueError is not finished (no bootstrap: the
    output alone says so)."""
    finished = ends_badly(launcher, "raise-warn-then-hang", "--exit-timeout", EXIT_TIMEOUT_S, "--max-restarts", 0,
                          "--rank-bootstrap", "off")

    assert 0 != finished.returncode, finished.explain()
    [killed] = finished.events("exit_hung_killed")
    assert (False, "ValueError: bad shape (3, 4) for layer 7") == (
        killed["judged"]["1"]["finished"], killed["judged"]["1"]["error"]), killed


def test_a_rank_uploading_in_its_own_code_at_the_exit_timeout_is_not_finished(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Its checkpoint was written before rank 0's exit 0 and it printed nothing since ("quiet"), but
    its stack was read and shows it in ``upload_to_bucket``: an exit hang of a working rank."""
    if find_py_spy() is None:
        pytest.skip("py-spy reads the stack; without it quiet is the evidence (tests/unit/core/test_rank_ends.py)")
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    finished = ends_badly(launcher, "upload-at-end", "--exit-timeout", EXIT_TIMEOUT_S, "--max-restarts", 0,
                          "--checkpoint-dir", checkpoints)

    assert 0 != finished.returncode, finished.explain()
    [killed] = finished.events("exit_hung_killed")
    judged = killed["judged"]["1"]
    assert judged["finished"] is False and "upload_to_bucket" in judged["frame"], killed
    assert "failed" == finished.report()["outcome"]


def test_a_hang_is_blamed_on_the_rank_in_its_own_code_not_on_the_rank_waiting_for_it(launcher: Launcher) -> None:
    """Only rank 0 prints steps; rank 1 gets stuck in its own code, so rank 0 stalls in its all-reduce.
    The stacks show rank 0 waiting in a collective and rank 1 in ``stuck_in_my_code``: rank 1 is the
    root cause, killed as hung; rank 0 is its collateral."""
    skip_unless_installed("torch")
    if find_py_spy() is None:
        pytest.skip("the stacks are the evidence; without them the culprit is said to be unknown (unit tests)")
    finished = ends_badly(launcher, "stuck-while-peer-waits", "--stall-timeout", 3, "--max-restarts", 0)

    assert 0 != finished.returncode, finished.explain()
    cause = root_cause(finished)
    assert ("hung", 1) == (cause["kind"], cause["rank"]), cause
    assert "rank 0 waited for it in a collective" in cause["message"], cause
    assert "stuck_in_my_code" in cause["message"], cause
    assert [] == [e for e in finished.events("worker_failed") if e["kind"] == "hung" and e["rank"] == 0]


def test_a_quiet_rank_whose_last_save_was_torn_is_not_finished(launcher: Launcher, tmp_path: Path) -> None:
    """No stack to read (rank 1 is ``sleep``, not Python), silent since a write its peer exited 0
    after: "quiet". But the write was half a ``torch.save``, rejected as not whole: no proof."""
    skip_unless_installed("torch")
    import torch

    buffer = io.BytesIO()
    torch.save({"step": 20, "w": torch.ones(4096)}, buffer)
    torn = tmp_path / "torn.pt"
    torn.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    finished = launcher.run(
        "--nproc-per-node", 2, "--exit-timeout", EXIT_TIMEOUT_S, "--max-restarts", 0, "--checkpoint-dir", checkpoints,
        command=per_rank(["sh", "-c", "sleep 0.5"], ["sh", "-c", f"cp {torn} {checkpoints}/ckpt_20.pt; exec sleep 60"]),
    )

    assert 0 != finished.returncode, finished.explain()
    [killed] = finished.events("exit_hung_killed")
    assert killed["judged"]["1"]["finished"] is False, killed
    assert "failed" == finished.report()["outcome"]


def test_a_handler_that_ran_while_the_rank_trained_on_leaves_its_exit_0_a_success(launcher: Launcher) -> None:
    """A progress dump on SIGUSR1 at step 2, then 38 more steps and exit 0: one attempt, succeeded,
    and the exit says why the catch was no stop."""
    finished = ends_badly(launcher, "handler-then-train", "--max-restarts", 2)

    assert 0 == finished.returncode, finished.explain()
    assert 1 == len(finished.report()["attempts"])
    assert [] == [e for e in finished.events("worker_failed") if e["kind"] == "preempted"]
    [rank_0] = [e for e in finished.events("worker_exited") if e["rank"] == 0]
    assert rank_0["not_stopped"].startswith("it trained "), rank_0
    assert "after it caught SIGUSR1" in rank_0["not_stopped"]


def test_a_rank_that_saves_and_exits_0_right_after_its_catch_is_preempted_however_fast_it_trained(
    launcher: Launcher,
) -> None:
    """Fifty steps a second for six seconds, SIGUSR1 caught at step 300, the step under way ended,
    a 2 s save and exit 0. The steps were counted from a report up to five seconds before the
    catch, so the rank seemed to train on after it and its clean exit was a success (one attempt,
    rank 1 left to finish alone). Now it is preempted, and attempt 1 runs."""
    finished = ends_badly(launcher, "fast-then-stop", "--max-restarts", 0)

    assert 0 == finished.returncode, finished.explain()
    assert "saving at step 301 on signal 10" in finished.rank_log(0, 0)
    attempts = finished.report()["attempts"]
    assert 2 == len(attempts), finished.explain()
    cause = attempts[0]["root_cause"]
    assert ("preempted", 0, "SIGUSR1", 0) == (cause["kind"], cause["rank"], cause["signal"], cause["exit_code"]), cause
    assert [] == [e for e in finished.events("worker_exited") if "not_stopped" in e], finished.events("worker_exited")
    [scheduled] = finished.events("restart_scheduled")
    assert "preemptions" == scheduled["budget"]


def test_a_handled_import_probe_does_not_make_a_later_sigkill_an_import_error(launcher: Launcher) -> None:
    """``import apex`` failed and was logged with its traceback at start-up; still in its start-up the
    rank is SIGKILLed: a killed rank, restarted, not a deterministic import error that stops the run."""
    finished = ends_badly(launcher, "probe-then-killed", "--max-restarts", 1)

    assert 0 == finished.returncode, finished.explain()
    assert "ModuleNotFoundError: No module named 'apex'" in finished.rank_log(0, 1)
    cause = root_cause(finished)
    assert ("killed", 1) == (cause["kind"], cause["rank"])
    assert cause["diagnosis"] is None or cause["diagnosis"]["signature"] != "import-error", cause
    assert 2 == len(finished.report()["attempts"])


def test_a_plain_traceback_no_rule_knows_is_the_diagnosis(launcher: Launcher) -> None:
    """``ValueError: bad shape (3, 4) for layer 7``, no ``@record``: its name is the signature, its
    line the diagnosis, in the report and the summary."""
    finished = ends_badly(launcher, "plain-error", "--max-restarts", 0)

    assert 1 == finished.returncode, finished.explain()
    assert {"signature": "exception:ValueError", "class": "unknown",
            "line": "ValueError: bad shape (3, 4) for layer 7"} == root_cause(finished)["diagnosis"]
    assert "exception:ValueError (unknown): ValueError: bad shape (3, 4) for layer 7" in finished.stderr
