"""Train to a step, then run out of GPU memory there, as PyTorch says it.

Usage: oom_at_step.py STEP [STEP_PER_ATTEMPT] [--from-attempt A]

With --from-attempt A, attempts before A exit 3 at once instead (another failure). Rank 1 calls ``elastic.heartbeat(step=...)`` up to STEP (plus STEP_PER_ATTEMPT times the attempt
number), keeps beating there for 6 s (the launcher hears a node's steps at most every 5 s), then
prints CUDA's out-of-memory error (antgroup/echomimic_v2#115) and exits 1. Rank 0 waits to be
stopped.
"""

import os
import sys
import time

import elastic

args = sys.argv[1:]
first = int(args.pop(args.index("--from-attempt") + 1)) if "--from-attempt" in args else 0
args = [a for a in args if a != "--from-attempt"]
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
step = int(args[0]) + attempt * int((args[1:] or ["0"])[0])
if attempt < first:
    sys.exit(3)
if os.environ["RANK"] != "1":
    time.sleep(120)
    sys.exit(0)
for done in range(1, step + 1):
    elastic.heartbeat(step=done)
deadline = time.monotonic() + 6
while time.monotonic() < deadline:
    elastic.heartbeat(step=step)
    time.sleep(0.1)
print("Traceback (most recent call last):", file=sys.stderr)
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.22 GiB. GPU 0 has a total capacity of "
      "15.69 GiB of which 3.71 GiB is free.", file=sys.stderr, flush=True)
sys.exit(1)
