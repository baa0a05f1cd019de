"""Show signs of life (elastic.heartbeat() calls, or printed lines), then go silent in one rank.

In attempt ATTEMPT, rank RANK shows signs of life for about a second, then
hangs in ``stuck_in_allreduce()``; the other ranks keep showing signs of life
(for at most 120 s). In other attempts every rank shows signs of life for about
a second and exits 0.

Usage: goes_silent.py api|output ATTEMPT RANK
"""

import os
import sys
import time

import elastic

mode, hang_attempt, hang_rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
hangs = attempt == hang_attempt and rank == hang_rank
keeps_going = attempt == hang_attempt and rank != hang_rank


def sign_of_life(step: int) -> None:
    if mode == "api":
        elastic.heartbeat(step=step)
    else:
        print(f"step {step}", flush=True)


def stuck_in_allreduce() -> None:
    time.sleep(300)


started = time.monotonic()
step = 0
while time.monotonic() - started < (120.0 if keeps_going else 1.0):
    sign_of_life(step)
    step += 1
    time.sleep(0.05)
if hangs:
    stuck_in_allreduce()
