r"""PyTorch Lightning under `elastic`: Lightning's own checkpoints, an exact mid-epoch resume, SIGTERM.

Run it under the launcher (2 CPU ranks, DDP over gloo; on GPUs make it
``accelerator="gpu"`` and ``process_group_backend="nccl"``)::

    python -m elastic run --nproc-per-node 2 --max-restarts 3 --checkpoint-dir ckpt/ -- \\
        python examples/lightning_train.py --output final.pt {resume_from?--ckpt-path}

Nothing in it knows about `elastic` beyond two command-line conventions:

- **The cluster.** The launcher sets torchrun's variables (``TORCHELASTIC_RUN_ID``,
  ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``,
  ``MASTER_PORT``), so Lightning picks its ``TorchElasticEnvironment`` by itself
  and joins the process group the launcher planned. The Trainer's ``devices``
  and ``num_nodes`` must multiply to ``WORLD_SIZE``: they are read from
  ``LOCAL_WORLD_SIZE`` and ``GROUP_WORLD_SIZE``.
- **Checkpoints.** ``ModelCheckpoint`` saves every ``--checkpoint-every``
  steps into ``--checkpoint-dir`` (default: the launcher's
  ``ELASTIC_CHECKPOINT_DIR``) under Lightning's default names,
  ``epoch=0-step=10.ckpt``, which the launcher ranks by step. Before each
  attempt it finds the newest complete one and ``{resume_from?--ckpt-path}``
  becomes ``--ckpt-path=PATH`` (nothing at all on a fresh start), handed to
  ``trainer.fit(ckpt_path=...)``.

**Mid-epoch resume.** Lightning restores the model, the optimizer and its loop
counters, but a plain ``DataLoader`` would restart the epoch from its first
batch. :class:`ResumableLoader` is a ``DataLoader`` with ``state_dict`` and
``load_state_dict``, which Lightning saves into every checkpoint and restores
before the first batch; its :class:`ShardedBatchSampler` draws each epoch's
order from the seed and the epoch alone and resumes at the saved position.
Everything else is seeded and deterministic, so the final weights are
bit-identical to an uninterrupted run's.

**SIGTERM.** Lightning 2.x's own handler runs a broadcast inside the signal
handler on every rank, while its loop broadcasts before each batch; when every
rank gets SIGTERM at once (a preemption notice, a stop) the collectives can
pair up differently on each rank and the ranks deadlock until they are killed,
with nothing saved. :class:`StopOnSigterm` replaces it: the ranks agree after
a step, save it under the same naming, stop, and exit 143 (128 + SIGTERM), so a
preempted run resumes from where it stopped and no launcher mistakes the stop
for success.

Every rank prints ``step N`` after each optimizer step (the launcher reads its
progress from it) and rank 0 prints ``saved checkpoint PATH`` once a
checkpoint is complete on disk.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback, Checkpoint, ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

FEATURES, HIDDEN = 16, 64


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps (default: 60)")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps between checkpoints (default: 5)")
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=os.environ.get("ELASTIC_CHECKPOINT_DIR") or "checkpoints",
        help="where ModelCheckpoint saves (default: $ELASTIC_CHECKPOINT_DIR, else checkpoints/)",
    )
    parser.add_argument("--ckpt-path", type=Path, help="checkpoint to resume from: {resume_from?--ckpt-path}")
    parser.add_argument("--samples", type=int, default=384, help="samples in the synthetic set (default: 384)")
    parser.add_argument("--batch-size", type=int, default=16, help="samples per rank and step (default: 16)")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam's learning rate (default: 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="seeds weights, data and shuffles (default: 0)")
    parser.add_argument("--output", type=Path, required=True, help="where rank 0 saves the final model state")
    parser.add_argument("--timeout", type=float, default=60.0, help="collective timeout in seconds (default: 60)")
    args = parser.parse_args(argv)
    if min(args.steps, args.checkpoint_every, args.batch_size, args.samples) < 1:
        parser.error("--steps, --checkpoint-every, --batch-size and --samples must be at least 1")
    return args


class ShardedBatchSampler(Sampler[list[int]]):
    """This rank's batches: a seeded shuffle per epoch, cut into global batches, sharded by rank.

    Its state is the epoch and how many of its samples were handed out, all
    ranks together (so a relaunch on another number of ranks goes on from the
    same place in the epoch); a fresh sampler given that state goes on with
    the next batch. It counts epochs itself: an iterator started once an epoch
    is used up starts the next one (Lightning starts one iterator per epoch,
    and calls ``set_epoch`` only on a loader's ``sampler``, not on its
    ``batch_sampler``).
    """

    def __init__(self, samples: int, batch_size: int, rank: int, world_size: int, seed: int) -> None:
        self.samples, self.batch_size = samples, batch_size
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.epoch = 0
        self.position = 0  # batches of this epoch handed out (or to skip, after a resume)
        if len(self) < 1:
            raise ValueError(f"--batch-size {batch_size} x {world_size} ranks exceeds {samples} samples")

    def __len__(self) -> int:
        return self.samples // (self.batch_size * self.world_size)

    def __iter__(self) -> Iterator[list[int]]:
        if self.position >= len(self):
            self.epoch, self.position = self.epoch + 1, 0
        order = torch.randperm(self.samples, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch))
        global_batch = self.batch_size * self.world_size
        while self.position < len(self):
            start = self.position * global_batch
            window = order[start : start + global_batch]
            self.position += 1
            yield window[self.rank :: self.world_size].tolist()

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "samples": self.position * self.batch_size * self.world_size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = int(state["epoch"])
        self.position = -(-int(state["samples"]) // (self.batch_size * self.world_size))  # whole batches, rounded up


class ResumableLoader(DataLoader[tuple[torch.Tensor, ...]]):
    """A ``DataLoader`` whose position Lightning saves in every checkpoint and restores on resume.

    Lightning treats a loader with ``state_dict``/``load_state_dict`` as
    stateful (its ``_Stateful`` protocol). It reads no batch ahead from a loader
    with a length, so the position saved is exactly the batches trained on.
    """

    batch_sampler: ShardedBatchSampler

    def state_dict(self) -> dict[str, int]:
        return self.batch_sampler.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.batch_sampler.load_state_dict(state)


class Regression(L.LightningModule):
    """A small MLP fitted to ``y = sin(x @ w) + noise`` with Adam; no dropout, nothing random in a step."""

    def __init__(self, lr: float, seed: int) -> None:
        super().__init__()
        self.lr = lr
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return nn.functional.mse_loss(self.net(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def make_loader(args: argparse.Namespace, rank: int, world_size: int) -> ResumableLoader:
    """The fixed synthetic set behind this rank's resumable loader."""
    generator = torch.Generator().manual_seed(args.seed + 1)
    inputs = torch.randn(args.samples, FEATURES, generator=generator)
    weights = torch.randn(FEATURES, 1, generator=generator)
    targets = torch.sin(inputs @ weights) + 0.1 * torch.randn(args.samples, 1, generator=generator)
    sampler = ShardedBatchSampler(args.samples, args.batch_size, rank, world_size, args.seed)
    return ResumableLoader(TensorDataset(inputs, targets), batch_sampler=sampler)


class PrintSteps(Callback):
    """``step N`` after every optimizer step, on every rank: the launcher's progress and hang signal."""

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        print(f"step {trainer.global_step}", flush=True)


class ReportingCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that has rank 0 print ``saved checkpoint PATH`` once a save is whole on disk."""

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        before = self.best_model_path
        super().on_train_batch_end(trainer, *args, **kwargs)  # saves, then waits for every rank
        if trainer.is_global_zero and self.best_model_path != before:
            print(f"saved checkpoint {self.best_model_path}", flush=True)


class StopOnSigterm(Checkpoint):
    """Save and stop on SIGTERM, every rank at the same step: what a preemption notice asks for.

    Lightning's own SIGTERM handler broadcasts (from rank 0) inside the signal
    handler, at whatever point each rank happens to be, while its training loop
    broadcasts before each batch too: when every rank gets SIGTERM at once, the two
    collectives can pair up differently on each rank and the ranks deadlock
    until they are killed, with nothing saved. This callback replaces that
    handler once training starts with one that only takes note. After each
    step the ranks agree (an all-reduce of their notes) whether any got
    SIGTERM; if so, every rank saves the step under ``checkpoint``'s naming,
    unless ``checkpoint`` just did, and the Trainer stops (``should_stop``).

    A ``Checkpoint`` runs after the other callbacks, and after ``checkpoint``
    when listed after it, so the step saved is whole, printed and counted.
    Lightning puts the previous handler back when ``fit`` ends.
    """

    def __init__(self, checkpoint: ModelCheckpoint) -> None:
        self.checkpoint = checkpoint
        self.requested = False  # this rank got SIGTERM
        self.stopped_at: int | None = None  # the step every rank stopped after

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        signal.signal(signal.SIGTERM, self._note)

    def _note(self, signum: int, frame: object) -> None:
        self.requested = True

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        flag = torch.tensor([int(self.requested)])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if not flag.item():
            return
        # the values ModelCheckpoint itself names its files with
        names = {"epoch": torch.tensor(trainer.current_epoch), "step": torch.tensor(trainer.global_step)}
        path = self.checkpoint.format_checkpoint_name(names)
        if self.checkpoint.best_model_path != path:  # the same on every rank: all save, or none
            trainer.save_checkpoint(path, weights_only=False)
            if trainer.is_global_zero:
                print(f"saved checkpoint {path}", flush=True)
        self.stopped_at = trainer.global_step
        trainer.should_stop = True


def main(argv: list[str] | None = None) -> int:
    """Train to ``--steps`` (resuming from ``--ckpt-path``); rank 0 writes the final weights."""
    args = parse_args(argv)
    env = os.environ
    rank, world_size = int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1"))
    checkpoint = ReportingCheckpoint(
        dirpath=args.checkpoint_dir, every_n_train_steps=args.checkpoint_every, save_top_k=-1
    )
    stopper = StopOnSigterm(checkpoint)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=int(env.get("LOCAL_WORLD_SIZE", "1")),
        num_nodes=int(env.get("GROUP_WORLD_SIZE", "1")),
        strategy=DDPStrategy(process_group_backend="gloo", timeout=timedelta(seconds=args.timeout)),
        max_steps=args.steps,
        max_epochs=-1,
        callbacks=[PrintSteps(), checkpoint, stopper],
        use_distributed_sampler=False,  # the loader shards by rank itself, resumably
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,  # torch.use_deterministic_algorithms, and CUBLAS_WORKSPACE_CONFIG on GPUs
    )
    model = Regression(args.lr, args.seed)
    try:
        trainer.fit(model, make_loader(args, rank, world_size), ckpt_path=args.ckpt_path)
    finally:
        # Lightning leaves the process group up; gloo's threads still running at interpreter
        # exit can abort the process ("terminate called without an active exception").
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    if stopper.stopped_at is not None:
        print(f"stopped by SIGTERM after step {stopper.stopped_at}", flush=True)
        return 128 + signal.SIGTERM
    if trainer.is_global_zero:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        partial = args.output.with_name(f".{args.output.name}.tmp")
        torch.save({name: tensor.detach().clone() for name, tensor in model.state_dict().items()}, partial)
        os.replace(partial, args.output)
        print(f"done: wrote {args.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
