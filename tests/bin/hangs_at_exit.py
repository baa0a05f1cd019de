"""Train to step STEPS, then hang at exit in every rank but 0 (in attempt HANG_ATTEMPT only).

Rank 0 checkpoints each step (elastic.worker) and exits 0 after the last. The
other ranks finish the same loop, then leave behind a non-daemon thread that
never ends, so the interpreter never exits (what a stuck destroy_process_group
or a forgotten thread does). With 'done' they first say they finished:
elastic.heartbeat(step=..., done=True). With 'working' they hang before their
work is done instead: half a second after the loop they print that they
evaluate, after rank 0's last checkpoint, and never return from it (the main
module still runs). Each rank writes the step it started from to
OUTDIR/attempt-A-rank-R.

Usage: hangs_at_exit.py CKPTDIR OUTDIR STEPS HANG_ATTEMPT done|silent|working
"""

import os
import sys
import threading
import time

import elastic
from elastic.worker import resume_point, save_json_checkpoint

checkpoints, out, steps, hang_attempt, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
attempt, rank = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), int(os.environ["RANK"])
start = resume_point()
first = 0 if start is None else start.step + 1
with open(os.path.join(out, f"attempt-{attempt}-rank-{rank}"), "w") as record:
    record.write(f"{first}\n")

for step in range(first, steps):
    time.sleep(0.05)
    elastic.heartbeat(step=step)
    if rank == 0:
        save_json_checkpoint(checkpoints, step, {"step": step})


def stuck_at_exit() -> None:
    while True:
        time.sleep(1)


def evaluate() -> None:
    print("evaluating", flush=True)
    while True:
        time.sleep(1)


if rank != 0 and attempt == hang_attempt:
    if mode == "working":
        time.sleep(0.5)
        evaluate()
    if mode == "done":
        elastic.heartbeat(step=steps - 1, done=True)
    threading.Thread(target=stuck_at_exit, name="stuck-at-exit").start()  # not a daemon
