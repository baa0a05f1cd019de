"""Print ``step N`` every STEP_S seconds for LAST steps; rank 0 saves with ``atomic_checkpoint`` every
SAVE_EVERY steps, each save taking SAVE_S seconds; every rank waits for the save, as a barrier would.

Usage: steps_with_slow_saves.py CKPTDIR STEP_S SAVE_EVERY SAVE_S LAST
"""

import os
import sys
import time

from elastic.worker import atomic_checkpoint

checkpoints = sys.argv[1]
step_s, save_every, save_s, last = float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
rank = os.environ["RANK"]
for step in range(1, last + 1):
    time.sleep(step_s)
    print(f"step {step}", flush=True)
    if step % save_every == 0:
        if rank == "0":
            with atomic_checkpoint(checkpoints, step) as tmp:
                (tmp / "state.txt").write_text(str(step))
                time.sleep(save_s)
        else:
            time.sleep(save_s)
sys.exit(0)
