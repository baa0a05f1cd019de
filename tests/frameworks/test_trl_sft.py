"""TRL's SFT trainer (the Hugging Face Trainer underneath) run as its users run it, ``python -m
trl.scripts.sft``, under the launcher: 2 CPU ranks on gloo, a tiny Llama and tokenizer made here,
offline. A rank SIGKILLed after a checkpoint resumes from it, and its steps are read, with tqdm and
with ``--disable_tqdm true``; a rank that hangs in interpreter
finalization after training finished (an at-exit handler that never returns) is judged finished,
and the job is never trained again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from harness import BIN, REPO, Launcher, launcher_env, rank_processes, skip_unless_installed, wait_for

skip_unless_installed("torch", "transformers", "trl", "datasets")  # the ranks import them; this process need not

RUN_TIMEOUT_S = 150.0
pytestmark = pytest.mark.timeout(2 * RUN_TIMEOUT_S)
EXIT_TIMEOUT_S = 5
# Runs in the ranks (the bootstrap imports it after its own). In the rank named, in attempt 0: an
# at-exit handler that never returns, registered first so it runs last, after every other one. In
# every other rank: leave at once, exit 0, when the script's main() returns, so that torch 2.13's
# gloo deadlock, which can hang any rank there as the DDP reducer is freed (the hang, at
# random), never hangs one the test did not ask to: with every rank hung, none exits 0.
HANG_AT_EXIT = '''import atexit, os, sys, time
if os.environ.get("ELASTIC_ATTEMPT") == "0" and os.environ.get("RANK") == os.environ.get("HANG_AT_EXIT_RANK"):
    def never_returns():
        while True:
            time.sleep(1)
    atexit.register(never_returns)
elif "RANK" in os.environ:
    def leave_after_main(frame, event, arg):
        if event == "return" and frame.f_code.co_name == "main" and frame.f_code.co_filename.endswith("sft.py"):
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(0)
    sys.setprofile(leave_after_main)
if "RANK" in os.environ and os.environ.get("STEP_PAUSE_S"):
    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(lambda *_: time.sleep(float(os.environ["STEP_PAUSE_S"])))
'''
# The last lines above, where the test sets STEP_PAUSE_S: every optimizer step (a torch hook
# common to all optimizers) takes that much longer, as a real model's step would. The tiny model
# steps in 30 ms, faster than the node looks at a quiet log (every 0.5 s); with steps longer than
# that, a look falls between any two redraws of the training bar, as on a real run.
STEP_PAUSE_S = 0.6
STEPS, SAVE_STEPS, KILL_AFTER = 20, 5, 10  # killed after the second save: attempt 0 has a step rate


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama, its tokenizer and a dataset, made once for the module."""
    out = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run([sys.executable, BIN / "make_tiny_llama.py", out], check=True, timeout=120,
                   capture_output=True, env=launcher_env())
    return out


def _env(tmp_path: Path, hang_at_exit_rank: int | None = None, step_pause_s: float | None = None) -> dict[str, str]:
    """Offline, with :data:`HANG_AT_EXIT` in the ranks (and each optimizer step ``step_pause_s`` longer)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HANG_AT_EXIT)
    return launcher_env(
        HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), PYTHONPATH=f"{site}:{REPO}",
        HANG_AT_EXIT_RANK="" if hang_at_exit_rank is None else str(hang_at_exit_rank),
        STEP_PAUSE_S="" if step_pause_s is None else str(step_pause_s),
    )


def _sft(tiny: Path, out: Path, steps: int, save_steps: int, *more: object) -> list[object]:
    """TRL's own command line, resuming where the launcher says."""
    return [
        sys.executable, "-m", "trl.scripts.sft", "--model_name_or_path", tiny / "model",
        "--dataset_name", tiny / "data", "--output_dir", out, "--max_steps", steps, "--save_steps", save_steps,
        "--per_device_train_batch_size", 4, "--max_length", 16, "--use_cpu", "true", "--ddp_backend", "gloo",
        "--report_to", "none", "--dataloader_num_workers", 0, "--logging_steps", 5, *more,
        "{resume_from?--resume_from_checkpoint}",
    ]


def _trainer_checkpoints(out: Path) -> list[int]:
    """The Trainer's complete checkpoint-N folders (with their trainer_state.json), in order."""
    return sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if (p / "trainer_state.json").exists())


@pytest.mark.parametrize("tqdm", [True, False], ids=["tqdm", "tqdm-off"])
def test_trl_sft_rank_sigkilled_after_a_checkpoint_resumes_from_it(
    launcher: Launcher, tiny: Path, tmp_path: Path, tqdm: bool
) -> None:
    """Rank 1 SIGKILLed once checkpoint-10 is complete: one restart, from the newest complete
    checkpoint, handed to the Trainer as --resume_from_checkpoint; the run ends at max_steps.

    The steps: with tqdm, rank 0's training bar, which the resumed Trainer draws anew at 0 before
    its first step (before: attempt 1's first step was that 0); with ``--disable_tqdm true``, the
    Trainer's trainer_state.json and its log lines' epochs. Either way attempt 1's first step is
    past the resume step, it reaches max_steps, and the ledger of each attempt calls its training
    training, not start-up: at least half the pauses of its steps after the first (the ledger
    counts an attempt's first step as start-up; steps are dated when the node reads them)."""
    out = tmp_path / "out"
    process = launcher.start(
        "--nproc-per-node", 2, "--max-restarts", 1, "--checkpoint-dir", out,
        command=_sft(tiny, out, STEPS, SAVE_STEPS, *(() if tqdm else ("--disable_tqdm", "true"))),
        env=_env(tmp_path, step_pause_s=STEP_PAUSE_S),
    )

    def saved() -> int | None:
        if process.poll() is not None:
            pytest.fail(f"the launcher ended (status {process.returncode}) before checkpoint-{KILL_AFTER}")
        pid = rank_processes(process.pid).get(1)
        return pid if _trainer_checkpoints(out)[-1:] >= [KILL_AFTER] and pid else None

    pid = wait_for(saved, f"checkpoint-{KILL_AFTER} and rank 1 running", RUN_TIMEOUT_S)
    os.kill(pid, signal.SIGKILL)  # by pid: a rank of the launcher this test started
    at_kill = _trainer_checkpoints(out)[-1]
    run = launcher.finished(process, timeout_s=RUN_TIMEOUT_S)

    assert 0 == run.returncode, run.explain()
    first, second = run.report()["attempts"]
    assert ("killed", 1) == (first["root_cause"]["kind"], first["root_cause"]["rank"])
    resume_step = second["resume_step"]  # the newest at the kill, or one the survivor finished saving after it
    assert resume_step is not None and at_kill <= resume_step < STEPS, (at_kill, second)
    assert str(out / f"checkpoint-{resume_step}") == run.events("attempt_started")[1]["resume_from"]
    assert STEPS == _trainer_checkpoints(out)[-1]
    assert (out / "model.safetensors").exists()
    assert (f"/{STEPS} [" in run.rank_log(0, 0)) is tqdm  # the training bar

    source = "output" if tqdm else "trainer"
    assert (source, True) == (first["first_step"]["source"], first["step_reached"]["step"] >= at_kill), first
    # The resumed run trains 5 steps in tens of ms: its first save can be read before tqdm redraws
    # the bar (at most every 0.1 s), so with tqdm either is attempt 1's first step; never the
    # bar's redraw at 0 (the step is past the resume step).
    assert second["first_step"]["source"] in ({source, "trainer"} if tqdm else {source}), second
    assert resume_step < second["first_step"]["step"] <= STEPS, second
    assert STEPS == second["step_reached"]["step"], second
    for row, trained in ((first, first["step_reached"]["step"]), (second, STEPS - resume_step)):
        ledger = row["ledger"]
        assert ledger["running_no_steps"] == 0.0, ledger
        training = ledger["productive"] + ledger["slow_steps"] + ledger["redone"]  # slow steps: training too
        assert training >= (trained - 1) * STEP_PAUSE_S / 2, (trained, ledger)


def test_trl_sft_rank_hung_in_interpreter_finalization_after_training_is_finished_not_rerun(
    launcher: Launcher, tiny: Path, tmp_path: Path
) -> None:
    """Rank 1 trains to the end, then hangs in an at-exit handler (torch's gloo deadlock at exit,
    made deterministic). Its stack shows its main thread in interpreter finalization: the run
    succeeds in the attempt that did the work, says which rank hung, where and why it was judged
    finished, and never trains past max_steps (before: a restart wrote checkpoint-21)."""
    out = tmp_path / "out"
    run = launcher.run(
        "--nproc-per-node", 2, "--max-restarts", 1, "--checkpoint-dir", out, "--exit-timeout", EXIT_TIMEOUT_S,
        command=_sft(tiny, out, 20, 10),
        env=_env(tmp_path, hang_at_exit_rank=1),
        timeout_s=RUN_TIMEOUT_S,
    )

    assert 0 == run.returncode, run.explain()
    report = run.report()
    assert ("succeeded", 1, 0) == (report["outcome"], len(report["attempts"]), report["restarts"]), run.explain()
    [killed] = run.events("exit_hung_killed")
    judged = killed["judged"]["1"]
    assert judged["finished"], killed
    if judged["evidence"] == "at_exit":  # it reached the at-exit handler
        assert "never_returns (sitecustomize.py:" in judged["why"]
    else:  # gloo's own deadlock hung it first, inside a destructor of the script's last line
        frame = judged["frame"].split(", ")[0]  # "is in c10d::ProcessGroupGloo::~ProcessGroupGloo (...)", then the wait
        assert ("quiet", True) == (judged["evidence"], "::~ProcessGroupGloo " in frame), judged
    assert report["reason"] == f"finished; rank 1 hung at exit and was killed, judged finished: {judged['why']}"
    assert report["reason"] in run.stderr
    assert [10, 20] == _trainer_checkpoints(out)  # never trained again: no checkpoint-21
