"""A gloo DDP rank (torch) as most scripts are written: only rank 0 prints its steps; with
``--silent`` no rank prints a step (its progress goes to a file, as to W&B or TensorBoard).

Every rank first says whether torch was imported before the script ran (a warm interpreter
imports it first) and writes its pid to DIR/attempt-A/rank-R.pid. Attempt 0 trains until it is
killed; a later attempt trains 3 steps and exits 0: with ``--hold``, once DIR/release exists, after
saying which RANK a child process it starts sees.

Usage: rank0_prints.py DIR [--silent] [--hold]
"""

import os
import sys
import time

print(f"torch imported before the script: {'torch' in sys.modules}", flush=True)
silent = "--silent" in sys.argv[2:]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
rank, attempt = dist.get_rank(), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
pids = os.path.join(sys.argv[1], f"attempt-{attempt}")
os.makedirs(pids, exist_ok=True)
with open(os.path.join(pids, f"rank-{rank}.pid"), "w") as pid_file:
    pid_file.write(str(os.getpid()))
step = 0
while attempt > 0 and step < 3 or attempt == 0:
    dist.all_reduce(torch.ones(4))
    step += 1
    if silent:
        with open(os.path.join(sys.argv[1], f"progress-{rank}"), "w") as progress:
            progress.write(str(step))
    elif rank == 0:
        print(f"step {step}", flush=True)
    time.sleep(0.1)
if attempt > 0 and "--hold" in sys.argv[2:]:
    print(f"a child sees RANK={os.popen('echo $RANK').read().strip()}", flush=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(sys.argv[1], "release")) and time.monotonic() < deadline:
        time.sleep(0.05)
dist.destroy_process_group()
