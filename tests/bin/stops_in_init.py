"""Two gloo ranks; in attempt 0, rank 0 stops itself (SIGSTOP) inside ``init_process_group``.

Rank 0 hosts the TCPStore: once it is stopped, rank 1 blocks in its own
``init_process_group`` too. A thread of rank 0 sends the SIGSTOP once the rank
bootstrap marked ``init_begin``; rank 1 waits before it calls in, so the stop
comes first. Every other attempt initialises, all-reduces once and exits 0.
"""

import datetime
import os
import signal
import threading
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
attempt = int(os.environ["ELASTIC_ATTEMPT"])
stops = attempt == 0


def stop_once_in_init() -> None:
    marks = os.environ["ELASTIC_STARTUP_FILE"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with open(marks) as text:
                if '"init_begin"' in text.read():
                    break
        except OSError:
            pass
        time.sleep(0.02)
    print("rank 0 stops itself in init_process_group", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)


if stops and rank == 0:
    threading.Thread(target=stop_once_in_init, daemon=True).start()
if stops and rank == 1:
    time.sleep(2)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
total = torch.ones(1)
dist.all_reduce(total)
print(f"rank {rank} attempt {attempt} sum {total.item():g}", flush=True)
dist.destroy_process_group()
