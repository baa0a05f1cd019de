"""Attempt 0: rank 0 writes CKPTDIR/step_N.pt (by rename) every 0.3 s, every rank runs up to 60 s.
Later attempts: record WORLD_SIZE and ELASTIC_WORLD_CHANGED in OUTDIR/attempt-A-rank-R, exit 0.

Usage: save_steps.py CKPTDIR OUTDIR
"""

import os
import sys
import time

checkpoints, out = sys.argv[1], sys.argv[2]
attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
if attempt != "0":
    with open(os.path.join(out, f"attempt-{attempt}-rank-{rank}"), "w") as record:
        record.write(f"{os.environ['WORLD_SIZE']} {os.environ['ELASTIC_WORLD_CHANGED']}\n")
    sys.exit(0)
for step in range(1, 200):
    if rank == "0":
        path = os.path.join(checkpoints, f"step_{step}.pt")
        with open(path + ".tmp", "w") as tmp:
            tmp.write(str(step))
        os.replace(path + ".tmp", path)
    time.sleep(0.3)
