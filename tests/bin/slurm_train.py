"""A small training loop: STEPS steps of 0.2 s; rank 0 checkpoints every EVERY steps and on SIGTERM.

Usage: slurm_train.py OUTDIR STEPS EVERY [--kill-at STEP]

Resumes from ``ELASTIC_RESUME_STEP``; checkpoints go to ``ELASTIC_CHECKPOINT_DIR``
with ``elastic.worker.atomic_checkpoint``. Each rank appends
``attempt A run RUN_ID from S`` to OUTDIR/rank-R.trace when it starts and
``attempt A end S how`` when it ends (``how``: ``done`` or ``sigterm``).
``--kill-at STEP``: in attempt 0, rank 1 SIGKILLs itself at that step.
On SIGTERM (a preemption notice, or a stop) rank 0 checkpoints the step it
reached, and every rank exits 0.
"""

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from elastic.worker import atomic_checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("steps", type=int)
parser.add_argument("every", type=int)
parser.add_argument("--kill-at", type=int)
args = parser.parse_args()

rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
checkpoints = os.environ["ELASTIC_CHECKPOINT_DIR"]
start = int(os.environ.get("ELASTIC_RESUME_STEP", "0"))
trace = args.out / f"rank-{rank}.trace"
stopping = False


def note(line: str) -> None:
    with trace.open("a") as out:
        out.write(line + "\n")


def on_sigterm(signum: int, frame: object) -> None:
    global stopping
    stopping = True


def save(step: int) -> None:
    if rank == 0 and step > 0:
        with atomic_checkpoint(checkpoints, step) as tmp:
            (tmp / "step.txt").write_text(str(step))


signal.signal(signal.SIGTERM, on_sigterm)
note(f"attempt {attempt} run {os.environ['ELASTIC_RUN_ID']} from {start}")
step = start
while step < args.steps:
    if stopping:
        save(step)
        note(f"attempt {attempt} end {step} sigterm")
        sys.exit(0)
    time.sleep(0.2)
    step += 1
    print(f"step {step}", flush=True)
    if args.kill_at == step and attempt == 0 and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if step % args.every == 0:
        save(step)
save(step)
note(f"attempt {attempt} end {step} done")
