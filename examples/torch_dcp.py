r"""torch.distributed.checkpoint under `elastic`, with DDP or FSDP2 (``fully_shard``).

Run it under the launcher (gloo on CPU, nccl when CUDA is available)::

    python -m elastic run --nproc-per-node 2 --max-restarts 3 --checkpoint-dir ckpt -- \
        python examples/torch_dcp.py --parallel fsdp2 --output final.pt

Every ``--checkpoint-every`` steps all ranks save the model and the optimizer
with ``torch.distributed.checkpoint.save`` into ``ckpt/step_N``: each rank
writes its own shard (``__R_0.distcp``) and rank 0 writes ``.metadata`` last,
once every rank's write is gathered, so a save cut short by a kill has no
``.metadata`` and the launcher never resumes from it. Before each attempt the
launcher finds the newest ``step_N`` holding ``.metadata`` and hands it over in
``ELASTIC_RESUME_FROM`` (read here with :func:`elastic.worker.resume_point`;
``--resume-from PATH`` overrides it, e.g. ``{resume_from?--resume-from}`` in the
command); every rank loads its part with ``torch.distributed.checkpoint.load``.
The checkpoint directory is ``--checkpoint-dir``, else the launcher's
``ELASTIC_CHECKPOINT_DIR``.

Everything is seeded (initial weights, synthetic data, each step's batch is a
function of the step) and the algorithms are deterministic, so a run that
loses a rank ends with weights bit-identical to an uninterrupted run's. Every
rank prints ``step N`` after each optimizer step (the launcher's progress);
rank 0 writes the full, unsharded final weights to ``--output``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

# Deterministic cuBLAS needs this before its first use (torch.use_deterministic_algorithms).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

from elastic.worker import checkpoint_dir, resume_point

FEATURES, HIDDEN, SAMPLES = 16, 64, 512


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallel", choices=("ddp", "fsdp2"), default="ddp", help="how to wrap the model (default: ddp)")
    parser.add_argument("--output", type=Path, required=True, help="where rank 0 saves the final (full) weights")
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps (default: 40)")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps between checkpoints (default: 5)")
    parser.add_argument("--checkpoint-dir", type=Path, help="where step_N folders go (default: $ELASTIC_CHECKPOINT_DIR)")
    parser.add_argument("--resume-from", type=Path, help="a step_N folder to resume from (default: $ELASTIC_RESUME_FROM)")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank and step (default: 32)")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam's learning rate (default: 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="seeds weights, data and shuffles (default: 0)")
    parser.add_argument("--step-pause", type=float, default=0.0, help="seconds to sleep after each step (default: 0)")
    parser.add_argument("--timeout", type=float, default=60.0, help="collective timeout in seconds (default: 60)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.checkpoint_every < 1 or args.batch_size < 1:
        parser.error("--steps, --checkpoint-every and --batch-size must be at least 1")
    return args


def make_model(seed: int) -> nn.Sequential:
    """A small MLP with the same initial weights on every rank."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))


def parallelize(model: nn.Sequential, how: str, device: torch.device) -> nn.Module:
    """DDP (a full replica per rank) or FSDP2 (each parameter sharded across the ranks)."""
    if how == "ddp":
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def make_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed synthetic regression set: ``y = sin(x @ w) + noise``."""
    generator = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randn(SAMPLES, FEATURES, generator=generator)
    weights = torch.randn(FEATURES, 1, generator=generator)
    targets = torch.sin(inputs @ weights) + 0.1 * torch.randn(SAMPLES, 1, generator=generator)
    return inputs, targets


def batch_indices(step: int, batch_size: int, seed: int) -> torch.Tensor:
    """This rank's sample indices for ``step`` (1-based): a seeded shuffle per epoch, sharded by rank.

    A function of the step alone, so a resumed run draws exactly the batches an uninterrupted one does.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    global_batch = batch_size * world
    per_epoch = SAMPLES // global_batch
    if per_epoch < 1:
        raise ValueError(f"--batch-size {batch_size} x {world} ranks exceeds {SAMPLES} samples")
    epoch, position = divmod(step - 1, per_epoch)
    order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    return order[position * global_batch : (position + 1) * global_batch][rank::world]


def save(directory: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank writes its part of ``directory/step_N``; rank 0 commits it with ``.metadata``."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state, "step": torch.tensor(step)}
    dcp.save(state, checkpoint_id=directory / f"step_{step}")


def load(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load every rank's part of the checkpoint at ``path``; the step it holds."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state: dict[str, Any] = {"model": model_state, "optimizer": optimizer_state, "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return int(state["step"])


def train(args: argparse.Namespace, device: torch.device) -> nn.Module:
    """Train to ``--steps`` from the resume point, saving every ``--checkpoint-every`` steps."""
    rank = dist.get_rank()
    model = parallelize(make_model(args.seed).to(device), args.parallel, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    directory = args.checkpoint_dir or checkpoint_dir() or Path("checkpoints")
    start = args.resume_from or (point.path if (point := resume_point()) is not None else None)
    done = 0 if start is None else load(start, model, optimizer)
    print(f"rank={rank} parallel={args.parallel} resumed_from={start} first_step={done + 1}", flush=True)
    inputs, targets = (tensor.to(device) for tensor in make_data(args.seed))
    for step in range(done + 1, args.steps + 1):
        index = batch_indices(step, args.batch_size, args.seed).to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(inputs[index]), targets[index])
        loss.backward()
        optimizer.step()
        print(f"step {step}", flush=True)
        if step % args.checkpoint_every == 0:
            save(directory, step, model, optimizer)
        if args.step_pause > 0:
            time.sleep(args.step_pause)
    return model


@record
def main(argv: list[str] | None = None) -> int:
    """Join the process group, train, and have rank 0 save the full final weights."""
    args = parse_args(argv)
    torch.use_deterministic_algorithms(True)
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout))
    try:
        model = train(args, device)
        # Collective under FSDP2 (it gathers the shards); a plain copy under DDP.
        weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if dist.get_rank() == 0:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            partial = args.output.with_name(f".{args.output.name}.tmp")
            torch.save(weights, partial)
            os.replace(partial, args.output)
            print(f"done: wrote {args.output}", flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
