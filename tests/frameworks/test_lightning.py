"""examples/lightning_train.py under the launcher: Lightning DDP ranks (gloo), a SIGKILL or a SIGTERM, an exact resume."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import REPO, Finished, Launcher, latest_step, skip_unless_installed, wait_for

skip_unless_installed("lightning")  # the ranks import it; this process need not
torch = pytest.importorskip("torch")

EXAMPLE = REPO / "examples" / "lightning_train.py"
# 320 samples in global batches of 2 x 16: 10 steps an epoch. Checkpoints every 3 steps, never at
# an epoch's end (3, 6, ..., 21), so the resume is mid-epoch however late the kill lands on a
# loaded machine (once, the kill meant for step 14 landed after the save of step 20). Rank 1 dies
# at step 13 or a little later: the resume is from step 12 or 15, and the rest of the run crosses
# an epoch boundary (step 20).
SAMPLES, BATCH_SIZE, STEPS, CHECKPOINT_EVERY, KILL_AT = 320, 16, 22, 3, 13
STEPS_PER_EPOCH = SAMPLES // (2 * BATCH_SIZE)
# Lightning's start-up (importing it alone takes seconds) on a loaded 2-core machine.
RUN_TIMEOUT_S = 240.0
SAVED = re.compile(r"^saved checkpoint .*step=(\d+)\.ckpt$", re.MULTILINE)
STOPPED = re.compile(r"^stopped by SIGTERM after step (\d+)$", re.MULTILINE)

pytestmark = pytest.mark.timeout(900)


def _options(checkpoints: Path) -> list[object]:
    return ["--nproc-per-node", 2, "--max-restarts", 3, "--checkpoint-dir", checkpoints]


def _command(output: Path) -> list[object]:
    return [
        sys.executable, EXAMPLE, "--steps", STEPS, "--checkpoint-every", CHECKPOINT_EVERY,
        "--samples", SAMPLES, "--batch-size", BATCH_SIZE, "--output", output,
        "{resume_from?--ckpt-path}",
    ]


def _weights(path: Path) -> dict[str, object]:
    weights: dict[str, object] = torch.load(path, weights_only=True)
    return weights


def _differing(expected: dict[str, object], actual: dict[str, object]) -> list[str]:
    """Names whose tensors are not bit-identical (every name must be in both)."""
    assert list(expected) == list(actual)
    return [name for name in expected if not torch.equal(expected[name], actual[name])]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The final weights of a run nothing interrupts (one attempt, exit 0)."""
    tmp_path = tmp_path_factory.mktemp("uninterrupted")
    launcher = Launcher(tmp_path)
    try:
        finished = launcher.run(
            *_options(tmp_path / "ckpt"), command=_command(tmp_path / "final.pt"), timeout_s=RUN_TIMEOUT_S
        )
        assert 0 == finished.returncode, finished.explain()
        assert 1 == len(finished.report()["attempts"])
        yield _weights(tmp_path / "final.pt")
    finally:
        launcher.close()


def test_a_lightning_run_resumed_mid_epoch_after_a_sigkill_ends_bit_identical_to_an_uninterrupted_one(
    launcher: Launcher, tmp_path: Path, uninterrupted: dict[str, object]
) -> None:
    """Rank 1 SIGKILLed mid-epoch costs one restart from Lightning's latest checkpoint, and the weights match to the bit."""
    process = launcher.start(*_options(tmp_path / "ckpt"), command=_command(tmp_path / "final.pt"))
    launcher.kill_rank_at_step(process, rank=1, step=KILL_AT, timeout_s=RUN_TIMEOUT_S)
    run = launcher.finished(process, timeout_s=RUN_TIMEOUT_S)

    assert 0 == run.returncode, run.explain()
    first, second = run.report()["attempts"]
    cause = first["root_cause"]
    assert ("killed", 1, "SIGKILL") == (cause["kind"], cause["rank"], cause["signal"])
    summary = [line for line in run.stderr.splitlines() if line.startswith(("elastic:", "  attempt 0"))]
    assert any("rank 1" in line and "killed (SIGKILL" in line for line in summary), run.explain()
    # Lightning's own latest complete checkpoint when rank 1 died: the last save rank 0 reported
    # whole, or the next one, whole on disk when rank 0 was stopped before it could say so.
    last_said = int(SAVED.findall(run.rank_log(0, 0))[-1])
    resumed = second["resume_step"]
    assert resumed in (last_said, last_said + CHECKPOINT_EVERY), (last_said, resumed)
    assert 0 != resumed % STEPS_PER_EPOCH  # a mid-epoch resume, the case a plain DataLoader gets wrong
    assert [None, resumed] == [e["resume_step"] for e in run.events("attempt_started")]
    assert f"step {resumed + 1}" == _first_step_line(run, attempt=1)
    assert [] == _differing(uninterrupted, _weights(tmp_path / "final.pt"))


def test_on_sigterm_every_rank_saves_the_same_step_exits_143_and_a_new_run_resumes_from_it_bit_identical(
    launcher: Launcher, tmp_path: Path, uninterrupted: dict[str, object]
) -> None:
    """A stop (SIGTERM to every rank, as on a preemption notice) saves the step reached; the next run resumes there."""
    checkpoints, output = tmp_path / "ckpt", tmp_path / "final.pt"
    launcher.run_dir = tmp_path / "run-stopped"
    process = launcher.start(*_options(checkpoints), command=_command(output))
    log = launcher.run_dir / "attempt-0" / "rank-0.log"
    wait_for(
        lambda: log.exists() and (latest_step(log.read_text(errors="replace")) or 0) >= 6,
        f"step 6 in {log}",
        RUN_TIMEOUT_S,
    )
    os.kill(process.pid, signal.SIGTERM)  # by pid: the launcher this test started
    stopped = launcher.finished(process, timeout_s=RUN_TIMEOUT_S)

    assert 128 + signal.SIGTERM == stopped.returncode, stopped.explain()
    steps = {int(m) for rank in (0, 1) for m in STOPPED.findall(stopped.rank_log(0, rank))}
    assert 1 == len(steps), steps  # every rank stopped after the same step
    (step,) = steps
    assert step < STEPS
    assert [] == [e for e in stopped.events("worker_failed") if e.get("signal") == "SIGKILL"]
    assert not output.exists()  # stopped, not finished
    assert step == stopped.report()["attempts"][0]["checkpoint_step"]

    launcher.run_dir = tmp_path / "run-resumed"
    resumed = launcher.run(*_options(checkpoints), command=_command(output), timeout_s=RUN_TIMEOUT_S)
    assert 0 == resumed.returncode, resumed.explain()
    assert [step] == [e["resume_step"] for e in resumed.events("attempt_started")]
    assert f"step {step + 1}" == _first_step_line(resumed, attempt=0)
    assert [] == _differing(uninterrupted, _weights(output))


def _first_step_line(run: Finished, attempt: int) -> str:
    """The first ``step N`` line rank 0 printed in ``attempt``."""
    return next(line for line in run.rank_log(attempt, 0).splitlines() if line.startswith("step "))
