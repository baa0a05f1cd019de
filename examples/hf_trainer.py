r"""Hugging Face Trainer under `elastic`: its own ``checkpoint-N`` folders, resumed with its own flag.

Run it under the launcher (2 ranks on CPU, gloo; one per GPU with nccl)::

    python -m elastic run --nproc-per-node 2 --max-restarts 3 --checkpoint-dir out -- \
        python examples/hf_trainer.py --output_dir out --output final.pt \
        '{resume_from?--resume_from_checkpoint}'

The Trainer saves ``out/checkpoint-N`` every ``--save_steps`` steps, as it
always does. Before each attempt the launcher finds the newest complete one
and, only when there is one, turns the last argument into
``--resume_from_checkpoint=out/checkpoint-N``; on a fresh start the argument
disappears, so ``trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)``
gets ``None``, exactly as with a hand-written command line.

The model is a one-layer GPT-2 built from a config (no download), trained on
seeded synthetic tokens; the Trainer restores the optimizer, the scheduler,
every rank's RNG state and the data order, so a run that loses a rank ends
with weights bit-identical to an uninterrupted run's. Every rank prints
``step N`` after each optimizer step (a ``TrainerCallback``), which the
launcher reads as progress; rank 0 writes the final weights to ``--output``.
With ``--no_step_lines`` it prints none, as a Trainer with tqdm off does: the
launcher then reads the Trainer's ``trainer_state.json`` at each save and the
epoch of its logs dict (``--logging_steps N``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import Dataset
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

VOCAB, CONTEXT, SAMPLES = 64, 16, 64


class SyntheticTokens(Dataset[dict[str, torch.Tensor]]):
    """Seeded random token sequences; the labels are the inputs (causal language modelling)."""

    def __init__(self, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed + 1)
        self.tokens = torch.randint(0, VOCAB, (SAMPLES, CONTEXT), generator=generator)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[index], "labels": self.tokens[index]}


class PrintSteps(TrainerCallback):
    """Print ``step N`` after every optimizer step, on every rank (the launcher's progress),
    unless ``quiet``.

    ``pause_s`` stretches each step, so that a kill sent from outside (a demo,
    a test) lands between two checkpoints rather than after the last one.
    """

    def __init__(self, pause_s: float, quiet: bool = False) -> None:
        self.pause_s = pause_s
        self.quiet = quiet

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> None:
        if not self.quiet:
            print(f"step {state.global_step}", flush=True)
        if self.pause_s > 0:
            time.sleep(self.pause_s)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (the Trainer's own flag names)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", type=Path, required=True, help="where checkpoint-N folders go")
    parser.add_argument("--output", type=Path, required=True, help="where rank 0 saves the final weights")
    parser.add_argument("--resume_from_checkpoint", help="a checkpoint-N folder to resume from")
    parser.add_argument("--max_steps", type=int, default=24, help="optimizer steps (default: 24)")
    parser.add_argument("--save_steps", type=int, default=4, help="steps between checkpoints (default: 4)")
    parser.add_argument("--per_device_train_batch_size", type=int, default=4, help="(default: 4)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the weights, data and shuffles (default: 0)")
    parser.add_argument("--step_pause", type=float, default=0.0, help="seconds to sleep after each step (default: 0)")
    parser.add_argument(
        "--logging_steps", type=int, default=0,
        help="the Trainer logs its metrics every N steps (default: 0, no logging)",
    )
    parser.add_argument(
        "--no_step_lines", action="store_true",
        help="print no 'step N' lines: the launcher reads the Trainer's own logs and trainer_state.json",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Train with the Trainer (resuming where told), then save the final weights from rank 0."""
    args = parse_args(argv)
    training_args = TrainingArguments(
        output_dir=str(args.output_dir),
        max_steps=args.max_steps,
        save_strategy="steps",
        save_steps=args.save_steps,
        per_device_train_batch_size=args.per_device_train_batch_size,
        learning_rate=1e-3,
        seed=args.seed,
        full_determinism=True,
        use_cpu=not torch.cuda.is_available(),
        ddp_backend=None if torch.cuda.is_available() else "gloo",
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,
        logging_strategy="steps" if args.logging_steps > 0 else "no",
        logging_steps=max(1, args.logging_steps),
        report_to="none",
        disable_tqdm=True,
    )
    torch.manual_seed(args.seed)
    config = GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=32, n_layer=1, n_head=2)
    model = GPT2LMHeadModel(config)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=SyntheticTokens(args.seed),
        callbacks=[PrintSteps(args.step_pause, quiet=args.no_step_lines)],
    )
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    if trainer.is_world_process_zero():
        args.output.parent.mkdir(parents=True, exist_ok=True)
        partial = args.output.with_name(f".{args.output.name}.tmp")
        torch.save({name: t.detach().cpu() for name, t in model.state_dict().items()}, partial)
        os.replace(partial, args.output)
        print(f"done: wrote {args.output}", flush=True)
    trainer.accelerator.wait_for_everyone()
    return 0


if __name__ == "__main__":
    sys.exit(main())
