r"""A torch-free toy training loop for trying out `elastic`: checkpoints, resume, heartbeats, failures.

Run it under the launcher::

    python -m elastic run --max-restarts 3 --nproc-per-node 2 --checkpoint-dir toy-checkpoints -- \\
        python examples/toy_train.py --fail-at-step 5

Each rank fits one float ``w`` to a target by gradient descent on
``(w - target) ** 2``: every rank computes the same values, and a resumed run
ends exactly where an uninterrupted one does. It uses the three things a
training script takes from ``elastic``:

- **Checkpoints.** After each step rank 0 saves the state with
  :func:`elastic.worker.atomic_checkpoint` into the launcher's
  ``--checkpoint-dir`` (``ELASTIC_CHECKPOINT_DIR``): ``step_5/state.json``
  plus a ``COMMITTED`` marker, renamed into place whole.
- **Resume.** Before each attempt the launcher finds the latest complete
  checkpoint and hands it over (``ELASTIC_RESUME_FROM``, read by
  :func:`elastic.worker.resume_point`); every rank starts from it.
- **Heartbeats.** ``elastic.heartbeat(step=...)`` each step lets
  ``--heartbeat-timeout`` catch a hung rank, and ``done=True`` after the last
  step tells the launcher the rank finished, should it then hang on its way out.

Failures are injected on the first attempt only (``TORCHELASTIC_RESTART_COUNT``
is ``0``), so the restarted run gets past them. Without a launcher it runs
alone, as rank 0 of 1, and checkpoints only if ``ELASTIC_CHECKPOINT_DIR`` is set.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import NoReturn

import elastic
from elastic.worker import ResumePoint, atomic_checkpoint, checkpoint_dir, resume_point

# "hang-at-exit": finish every step, say so (done=True), then never exit.
FAIL_MODES = ("sigkill", "exit", "segv", "hang", "hang-at-exit")
STATE_FILE = "state.json"
TARGET = 1.0
LEARNING_RATE = 0.1


@dataclass(frozen=True)
class Ranks:
    """Where this process sits in the job, from the launcher's torchrun-style variables."""

    rank: int
    world_size: int
    restart_count: int

    @classmethod
    def from_env(cls) -> Ranks:
        env = os.environ
        return cls(
            int(env.get("RANK", "0")),
            int(env.get("WORLD_SIZE", "1")),
            int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        )


@dataclass(frozen=True)
class TrainState:
    """The whole training state: the last completed step and the weight."""

    step: int
    weight: float

    @property
    def loss(self) -> float:
        """The squared distance from the target."""
        return (self.weight - TARGET) ** 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="steps to run (default: 20)")
    parser.add_argument("--step-time", type=float, default=0.2, help="seconds each step takes (default: 0.2)")
    parser.add_argument("--fail-at-step", type=int, help="fail on reaching this step, first attempt only")
    parser.add_argument("--fail-rank", type=int, help="the rank that fails (default: the last one)")
    parser.add_argument(
        "--fail-mode", choices=FAIL_MODES, default="sigkill",
        help="how to fail (default: sigkill); hang-at-exit needs no --fail-at-step",
    )
    parser.add_argument("--fail-exit-code", type=int, default=1, help="exit code for --fail-mode exit (default: 1)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.step_time < 0:
        parser.error("--step-time must not be negative")
    if args.fail_at_step is not None and not 1 <= args.fail_at_step <= args.steps:
        parser.error(f"--fail-at-step must be between 1 and --steps ({args.steps})")
    return args


def load_checkpoint(start: ResumePoint | None) -> TrainState:
    """The state saved in the launcher's resume point, or a fresh one."""
    if start is None:
        return TrainState(step=0, weight=0.0)
    data = json.loads((start.path / STATE_FILE).read_text())
    if data["step"] != start.step:
        raise RuntimeError(f"{start.path}: holds step {data['step']}, the launcher says {start.step}")
    return TrainState(step=start.step, weight=float(data["weight"]))


def save_checkpoint(state: TrainState) -> None:
    """Commit ``step_{step}`` atomically into the launcher's checkpoint directory."""
    directory = checkpoint_dir()
    if directory is None:
        return
    with atomic_checkpoint(directory, state.step) as tmp:  # a crash in here leaves no step_N behind
        (tmp / STATE_FILE).write_text(json.dumps({"step": state.step, "weight": state.weight}))


def train_step(state: TrainState) -> TrainState:
    """One deterministic step of gradient descent on (w - target) ** 2."""
    gradient = 2.0 * (state.weight - TARGET)
    return TrainState(step=state.step + 1, weight=state.weight - LEARNING_RATE * gradient)


def is_failing_rank(args: argparse.Namespace, ranks: Ranks) -> bool:
    """Whether this rank is the one to fail: ``--fail-rank`` (or the last), on the first attempt only."""
    fail_rank = ranks.world_size - 1 if args.fail_rank is None else args.fail_rank
    return ranks.rank == fail_rank and ranks.restart_count == 0


def inject_failure(mode: str, exit_code: int) -> NoReturn:
    """Fail the way asked; never returns."""
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "segv":
        ctypes.string_at(0)  # reads address 0: a real segmentation fault
    elif mode == "exit":
        sys.exit(exit_code)
    while True:  # "hang" and "hang-at-exit" (and a backstop for the others): alive, no heartbeat
        time.sleep(3600)


def log(ranks: Ranks, message: str) -> None:
    """Print one line tagged with the rank, right away."""
    print(f"rank={ranks.rank} {message}", flush=True)


def train(args: argparse.Namespace, ranks: Ranks) -> TrainState:
    """Run from the resume point to ``--steps``, beating every step; rank 0 checkpoints each one."""
    start = resume_point()  # ELASTIC_RESUME_FROM and ELASTIC_RESUME_STEP; None on a fresh start
    state = load_checkpoint(start)
    if start is not None:
        log(ranks, f"resuming from step {start.step} ({start.path})")
    elastic.heartbeat(step=state.step)
    while state.step < args.steps:
        step = state.step + 1
        if step == args.fail_at_step and args.fail_mode != "hang-at-exit" and is_failing_rank(args, ranks):
            log(ranks, f"injecting failure {args.fail_mode!r} at step {step}")
            inject_failure(args.fail_mode, args.fail_exit_code)
        time.sleep(args.step_time)
        state = train_step(state)
        if ranks.rank == 0:
            save_checkpoint(state)
        elastic.heartbeat(step=state.step)
        log(ranks, f"step={state.step}/{args.steps} loss={state.loss:.6f}")
    return state


def main(argv: list[str] | None = None) -> int:
    """Train this rank to the last step, say it finished, and exit."""
    args = parse_args(argv)
    ranks = Ranks.from_env()
    where = checkpoint_dir() or "nowhere (no --checkpoint-dir: a restart starts over)"
    log(ranks, f"world_size={ranks.world_size} attempt={ranks.restart_count} checkpoints={where}")
    state = train(args, ranks)
    elastic.heartbeat(step=state.step, done=True)  # finished: a hang from here on is no failure
    log(ranks, f"done: step={state.step} loss={state.loss:.6f}")
    if args.fail_mode == "hang-at-exit" and is_failing_rank(args, ranks):
        log(ranks, "injecting failure 'hang-at-exit'")
        inject_failure(args.fail_mode, args.fail_exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
