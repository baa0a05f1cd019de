r"""PyTorch DDP training under `elastic`: atomic checkpoints, exact resumption, an injected SIGKILL.

Run it under the launcher (gloo on CPU, nccl when CUDA is available)::

    python -m elastic run --nproc-per-node 2 --max-restarts 3 --checkpoint-dir ckpt/ -- \\
        python examples/torch_ddp.py --output final.pt --fail-at-step 23

Rank 1 SIGKILLs itself on the first attempt right after step 23's optimizer
step, before that step is saved; the launcher restarts both ranks from the
latest complete checkpoint (``ckpt/step_20``), which they redo steps 21-23
from. Everything the run depends on is seeded (the model's initial weights, the
synthetic data, each step's shuffle) and the algorithms are deterministic, so
``final.pt`` is bit-identical to the one an uninterrupted run writes.

Rank 0 saves the model, the optimizer and the step every ``--checkpoint-every``
steps with :func:`elastic.worker.atomic_checkpoint`; the launcher finds the
newest one and hands it over in ``ELASTIC_RESUME_FROM``
(:func:`elastic.worker.resume_point`), where every rank loads it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

# Deterministic cuBLAS needs this before its first use (torch.use_deterministic_algorithms).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from elastic.worker import atomic_checkpoint, checkpoint_dir, resume_point

STATE_FILE = "state.pt"
FEATURES, HIDDEN, SAMPLES = 16, 64, 512


@dataclass(frozen=True)
class Ranks:
    """Where this process sits in the job, from the launcher's torchrun-style variables."""

    rank: int
    local_rank: int
    world_size: int
    restart_count: int

    @classmethod
    def from_env(cls) -> Ranks:
        env = os.environ
        return cls(
            int(env["RANK"]),
            int(env.get("LOCAL_RANK", "0")),
            int(env["WORLD_SIZE"]),
            int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps (default: 60)")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps between checkpoints (default: 5)")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank and step (default: 32)")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam's learning rate (default: 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="seeds weights, data and shuffles (default: 0)")
    parser.add_argument("--output", type=Path, required=True, help="where rank 0 saves the final model state")
    parser.add_argument("--fail-at-step", type=int, help="SIGKILL --fail-rank after this step, first attempt only")
    parser.add_argument("--fail-rank", type=int, help="the rank that fails (default: the last one)")
    parser.add_argument("--timeout", type=float, default=60.0, help="collective timeout in seconds (default: 60)")
    parser.add_argument("--step-sleep", type=float, default=0.0,
                        help="seconds to sleep after each step, to watch a failure happen (default: 0)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.checkpoint_every < 1 or args.batch_size < 1:
        parser.error("--steps, --checkpoint-every and --batch-size must be at least 1")
    return args


def make_model(seed: int) -> nn.Module:
    """A small MLP with the same initial weights on every rank."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))


def make_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed synthetic regression set: ``y = sin(x @ w) + noise``."""
    generator = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randn(SAMPLES, FEATURES, generator=generator)
    weights = torch.randn(FEATURES, 1, generator=generator)
    targets = torch.sin(inputs @ weights) + 0.1 * torch.randn(SAMPLES, 1, generator=generator)
    return inputs, targets


def batch_indices(step: int, ranks: Ranks, batch_size: int, seed: int) -> torch.Tensor:
    """This rank's sample indices for ``step`` (1-based): a seeded shuffle per epoch, sharded by rank.

    A function of the step alone, as in ``DistributedSampler.set_epoch``, so a
    resumed run draws exactly the batches an uninterrupted one does.
    """
    global_batch = batch_size * ranks.world_size
    per_epoch = SAMPLES // global_batch
    if per_epoch < 1:
        raise ValueError(f"--batch-size {batch_size} x {ranks.world_size} ranks exceeds {SAMPLES} samples")
    epoch, position = divmod(step - 1, per_epoch)
    order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    window = order[position * global_batch : (position + 1) * global_batch]
    return window[ranks.rank :: ranks.world_size]


def save_checkpoint(step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Rank 0 commits ``step_{step}`` atomically; every rank waits for it."""
    if dist.get_rank() == 0:
        with atomic_checkpoint(checkpoint_dir() or Path("checkpoints"), step) as tmp:
            state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(state, tmp / STATE_FILE)
        print(f"rank=0 step={step}: saved a checkpoint", flush=True)
    dist.barrier()


def load_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> int:
    """Load the launcher's resume point into the model and optimizer; the step it holds (0 on a fresh start)."""
    start = resume_point()
    if start is None:
        return 0
    state = torch.load(start.path / STATE_FILE, map_location=device, weights_only=True)
    if state["step"] != start.step:
        raise RuntimeError(f"{start.path}: holds step {state['step']}, the launcher says {start.step}")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return start.step


def train(args: argparse.Namespace, ranks: Ranks, device: torch.device) -> nn.Module:
    """Train to ``--steps`` from the resume point; the trained (unwrapped) model."""
    model = make_model(args.seed).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    first = load_checkpoint(model, optimizer, device) + 1
    log(ranks, f"attempt={ranks.restart_count} world_size={ranks.world_size} first_step={first}")
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    inputs, targets = (tensor.to(device) for tensor in make_data(args.seed))
    fail_rank = ranks.world_size - 1 if args.fail_rank is None else args.fail_rank
    for step in range(first, args.steps + 1):
        index = batch_indices(step, ranks, args.batch_size, args.seed).to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(inputs[index]), targets[index])
        loss.backward()
        optimizer.step()
        if step == args.fail_at_step and ranks.rank == fail_rank and ranks.restart_count == 0:
            log(ranks, f"step={step}: SIGKILLing myself before the checkpoint")
            os.kill(os.getpid(), signal.SIGKILL)
        if step % args.checkpoint_every == 0:
            log(ranks, f"step={step}/{args.steps} loss={loss.item():.6f}")
            save_checkpoint(step, model, optimizer)
        time.sleep(args.step_sleep)
    return model


def log(ranks: Ranks, message: str) -> None:
    """Print one line tagged with the rank."""
    print(f"rank={ranks.rank} {message}", flush=True)


@record
def main(argv: list[str] | None = None) -> int:
    """Join the process group, train, and have rank 0 save the final model state."""
    args = parse_args(argv)
    ranks = Ranks.from_env()
    torch.use_deterministic_algorithms(True)
    if torch.cuda.is_available():
        device = torch.device("cuda", ranks.local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=args.timeout))
    try:
        model = train(args, ranks, device)
        if ranks.rank == 0:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            partial = args.output.with_name(f".{args.output.name}.tmp")
            torch.save({name: tensor.cpu() for name, tensor in model.state_dict().items()}, partial)
            os.replace(partial, args.output)
            log(ranks, f"done: wrote {args.output}")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
