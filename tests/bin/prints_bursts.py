"""Rank 0 prints its steps in bursts and one at a time, and notes in a side file what it printed when.

Usage: prints_bursts.py SIDE_FILE PAUSE_S

Rank 0 prints ``step 0`` to ``step 4`` in one write, then steps 5 to 84 one every 0.15 s, then
``step 85`` to ``step 94`` in one write, then nothing for PAUSE_S (an evaluation), and exits 0.
After each write it appends ``STEP TIME`` to SIDE_FILE: the highest step printed so far and
``time.time()`` once it is flushed. The other ranks print nothing, and exit 0 once rank 0 wrote
``done`` there (as a DDP script where only rank 0 prints).
"""

import os
import sys
import time

side, pause_s = sys.argv[1], float(sys.argv[2])
rank = int(os.environ["RANK"])


def printed(steps: range) -> None:
    sys.stdout.write("".join(f"step {n} loss 2.31\n" for n in steps))
    sys.stdout.flush()
    with open(side, "a") as notes:
        notes.write(f"{steps[-1]} {time.time()}\n")


if rank == 0:
    time.sleep(0.5)
    printed(range(0, 5))
    for step in range(5, 85):
        time.sleep(0.15)
        printed(range(step, step + 1))
    printed(range(85, 95))
    time.sleep(pause_s)
    with open(side, "a") as notes:
        notes.write("done\n")
else:
    deadline_at = time.monotonic() + 120.0
    while time.monotonic() < deadline_at:
        try:
            with open(side) as notes:
                if "done" in notes.read():
                    break
        except FileNotFoundError:
            pass
        time.sleep(0.1)
sys.exit(0)
