"""Steps at a steady pace; after a restore, rank 0's first steps arrive in a burst ahead of their work.

Usage: bursts_after_restore.py CKPTDIR STEP_S LAST BURST

Each rank sleeps 0.5 s (a compilation), then prints ``step N loss 2.31`` as each step is done,
one every STEP_S seconds, from ELASTIC_RESUME_STEP (or 0) up to LAST, and exits 0; rank 0 saves
CKPTDIR/step_N.pt (by rename) every 10 steps. In a restored attempt (ELASTIC_RESUME_STEP set) rank 0
prints its next BURST steps at once, in three writes 0.15 s apart, before their work (a host that
queues steps ahead of its device after a restore, as JAX's asynchronous dispatch does), then does
their work silently and goes on at the steady pace; rank 1 prints each step as it is done.
"""

import os
import sys
import time

checkpoints, step_s, last, burst = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rank = int(os.environ["RANK"])
resumed = os.environ.get("ELASTIC_RESUME_STEP")
step = int(resumed or 0)


def done(number: int) -> None:
    if rank == 0 and number % 10 == 0:
        path = os.path.join(checkpoints, f"step_{number}.pt")
        with open(path + ".tmp", "w") as tmp:
            tmp.write(str(number))
        os.replace(path + ".tmp", path)


time.sleep(0.5)
if resumed is not None and rank == 0:
    queued = list(range(step + 1, min(last, step + burst) + 1))
    for part in (queued[: len(queued) // 3], queued[len(queued) // 3 : 2 * len(queued) // 3], queued[2 * len(queued) // 3 :]):
        sys.stdout.write("".join(f"step {n} loss 2.31\n" for n in part))
        sys.stdout.flush()
        time.sleep(0.15)
    for number in queued:
        time.sleep(step_s)
        done(number)
    step = queued[-1] if queued else step
while step < last:
    time.sleep(step_s)
    step += 1
    print(f"step {step} loss 2.31", flush=True)
    done(step)
sys.exit(0)
