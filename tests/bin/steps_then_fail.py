"""Print ``step N`` every STEP_S seconds; rank 0 saves CKPTDIR/step_N.pt (by rename) every SAVE_EVERY steps.

Resumes from ELASTIC_RESUME_STEP. On attempt 0, rank 0 exits 1 after FAIL_AT steps; later attempts
(and the others) stop after LAST steps and exit 0. Before the first step it sleeps STARTUP_S (an
import or a compilation).

Usage: steps_then_fail.py CKPTDIR STEP_S SAVE_EVERY FAIL_AT LAST STARTUP_S
"""

import os
import sys
import time

checkpoints = sys.argv[1]
step_s, save_every, fail_at, last = float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
startup_s = float(sys.argv[6])
attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
print(f"rank {rank} starting", flush=True)
time.sleep(startup_s)
step = int(os.environ.get("ELASTIC_RESUME_STEP") or 0)
while step < last:
    time.sleep(step_s)
    step += 1
    print(f"step {step}", flush=True)
    if rank == "0" and step % save_every == 0:
        path = os.path.join(checkpoints, f"step_{step}.pt")
        with open(path + ".tmp", "w") as tmp:
            tmp.write(str(step))
        os.replace(path + ".tmp", path)
    if attempt == "0" and rank == "0" and step == fail_at:
        sys.exit(1)
sys.exit(0)
