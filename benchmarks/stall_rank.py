"""A rank for bench_stall.py: prints ``step N`` lines, then stalls or saves.

Usage: stall_rank.py stall STEP_S MARK
       stall_rank.py save STEP_S SAVE_S SAVE_DIR

``stall``: rank 1 prints 20 steps, writes the wall time of its last step to
MARK, then prints only NCCL-style warnings (never a step) until killed; rank 0
steps on (for at most 120 s). ``save``: every rank prints 20 steps, writes a
checkpoint file into SAVE_DIR for SAVE_S seconds (a chunk every 0.1 s), prints
5 more steps and exits 0.
"""

import os
import sys
import time

mode, step_s = sys.argv[1], float(sys.argv[2])
rank = int(os.environ["RANK"])


def train(first: int, count: int) -> int:
    for step in range(first, first + count):
        print(f"step {step} loss 2.31", flush=True)
        time.sleep(step_s)
    return first + count


if mode == "stall":
    if rank == 1:
        train(1, 20)
        with open(sys.argv[3], "w") as mark:
            mark.write(f"{time.time():.6f}")
        while True:
            print("NCCL WARN Call to connect returned Connection refused, retrying", flush=True)
            time.sleep(0.1)
    started = time.monotonic()
    step = 1
    while time.monotonic() - started < 120.0:
        step = train(step, 1)
else:
    save_s, save_dir = float(sys.argv[3]), sys.argv[4]
    step = train(1, 20)
    os.makedirs(save_dir, exist_ok=True)
    started = time.monotonic()
    with open(os.path.join(save_dir, f"rank-{rank}.bin"), "wb") as out:
        while time.monotonic() - started < save_s:
            out.write(b"\0" * 4096)
            out.flush()
            time.sleep(0.1)
    train(step, 5)
