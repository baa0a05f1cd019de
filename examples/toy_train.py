r"""A torch-free toy training loop for trying out `elastic`: checkpoints, resume, injected failures.

Run it under the launcher::

    python -m elastic run --nproc-per-node 2 --max-restarts 1 -- \\
        python examples/toy_train.py --fail-at-step 5 --fail-mode segv

or alone, by setting the rank variables by hand::

    RANK=0 WORLD_SIZE=1 TORCHELASTIC_RUN_ID=demo python examples/toy_train.py

Each rank fits one float ``w`` to a target by gradient descent on
``(w - target) ** 2``, so the result is the same whether or not the run was
interrupted. Every step ends with an atomic checkpoint of the rank's state in
``rank-{RANK}.json``; at start the rank resumes from that file if present.

Failures are injected only on the first attempt (``TORCHELASTIC_RESTART_COUNT``
is ``0``), so a restarted run gets past them.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

FAIL_MODES = ("sigkill", "exit", "segv", "hang")
TARGET = 1.0
LEARNING_RATE = 0.1


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in the job, read from torchrun-style variables."""

    rank: int
    world_size: int
    restart_count: int
    run_id: str


@dataclass(frozen=True)
class TrainState:
    """The rank's whole training state: the last completed step and the weight."""

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
    parser.add_argument(
        "--step-time", type=float, default=0.2, help="seconds each step takes (default: 0.2)"
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        help="where to checkpoint (default: $ELASTIC_CHECKPOINT_DIR, "
        "else toy-checkpoints/$TORCHELASTIC_RUN_ID)",
    )
    parser.add_argument(
        "--fail-at-step", type=int, help="fail on reaching this step, first attempt only"
    )
    parser.add_argument("--fail-rank", type=int, help="the rank that fails (default: the last one)")
    parser.add_argument(
        "--fail-mode", choices=FAIL_MODES, default="sigkill", help="how to fail (default: sigkill)"
    )
    parser.add_argument(
        "--fail-exit-code", type=int, default=1, help="exit code for --fail-mode exit (default: 1)"
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.step_time < 0:
        parser.error("--step-time must not be negative")
    if args.fail_at_step is not None and not 1 <= args.fail_at_step <= args.steps:
        parser.error(f"--fail-at-step must be between 1 and --steps ({args.steps})")
    return args


def read_rank_info(env: dict[str, str]) -> RankInfo:
    """Read the rank variables, defaulting to a single fresh process."""
    return RankInfo(
        rank=int(env.get("RANK", "0")),
        world_size=int(env.get("WORLD_SIZE", "1")),
        restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        run_id=env.get("TORCHELASTIC_RUN_ID", "local"),
    )


def resolve_checkpoint_dir(flag: Path | None, env: dict[str, str], run_id: str) -> Path:
    """Pick the checkpoint directory: the flag, else the launcher's, else one per run."""
    if flag is not None:
        return flag
    if env.get("ELASTIC_CHECKPOINT_DIR"):
        return Path(env["ELASTIC_CHECKPOINT_DIR"])
    return Path("toy-checkpoints") / run_id


def load_checkpoint(path: Path) -> TrainState | None:
    """Read a checkpoint, or None when there is none yet."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return TrainState(step=int(data["step"]), weight=float(data["weight"]))


def save_checkpoint(path: Path, state: TrainState) -> None:
    """Write a checkpoint atomically: temp file, fsync, rename, fsync the directory."""
    payload = json.dumps({"step": state.step, "weight": state.weight, "loss": state.loss})
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as tmp:
            tmp.write(payload)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make a rename inside the directory durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def train_step(state: TrainState) -> TrainState:
    """One deterministic step of gradient descent on (w - target) ** 2."""
    gradient = 2.0 * (state.weight - TARGET)
    return TrainState(step=state.step + 1, weight=state.weight - LEARNING_RATE * gradient)


def should_fail(args: argparse.Namespace, info: RankInfo, step: int) -> bool:
    """Whether this rank fails on reaching this step (first attempt only)."""
    fail_rank = info.world_size - 1 if args.fail_rank is None else args.fail_rank
    return args.fail_at_step == step and info.rank == fail_rank and info.restart_count == 0


def inject_failure(mode: str, exit_code: int) -> NoReturn:
    """Fail the way asked; never returns."""
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "segv":
        ctypes.string_at(0)  # reads address 0: a real segmentation fault
    elif mode == "exit":
        sys.exit(exit_code)
    while True:  # "hang", and a backstop for the modes above: alive, but stuck
        time.sleep(3600)


def log(info: RankInfo, message: str) -> None:
    """Print one line tagged with the rank, right away."""
    print(f"rank={info.rank} {message}", flush=True)


def train(args: argparse.Namespace, info: RankInfo, checkpoint: Path) -> TrainState:
    """Run the remaining steps, checkpointing after each; return the final state."""
    state = load_checkpoint(checkpoint)
    if state is None:
        state = TrainState(step=0, weight=0.0)
    else:
        log(info, f"resuming from step {state.step}")
    while state.step < args.steps:
        if should_fail(args, info, state.step + 1):
            log(info, f"injecting failure {args.fail_mode!r} at step {state.step + 1}")
            inject_failure(args.fail_mode, args.fail_exit_code)
        time.sleep(args.step_time)
        state = train_step(state)
        save_checkpoint(checkpoint, state)
        log(info, f"step={state.step}/{args.steps} loss={state.loss:.6f}")
    return state


def main(argv: list[str] | None = None) -> int:
    """Train this rank to the last step and report it."""
    args = parse_args(argv)
    env = dict(os.environ)
    info = read_rank_info(env)
    directory = resolve_checkpoint_dir(args.checkpoint_dir, env, info.run_id)
    directory.mkdir(parents=True, exist_ok=True)
    log(info, f"world_size={info.world_size} attempt={info.restart_count} checkpoints={directory}")
    state = train(args, info, directory / f"rank-{info.rank}.json")
    log(info, f"done: step={state.step} loss={state.loss:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
