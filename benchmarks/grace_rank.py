"""A rank for ``bench_drain_grace.py``: its first output line is a wall-clock stamp.

On attempt 0, rank 0 is a survivor that never exits on SIGTERM (``ignore``: SIG_IGN;
``jax``: ``jax.distributed.initialize()``, whose preemption service catches SIGTERM),
and every rank writes PIDDIR/rank-R.pid once ready, then sleeps until the benchmark
SIGKILLs rank 1. On later attempts every rank prints its stamp and exits 0.

Usage: grace_rank.py PIDDIR ignore|jax
"""

import time

STARTED = time.time()  # before anything else: the first sign this process gives
print(f"first line at {STARTED:.6f}", flush=True)

import os  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402

directory, mode = sys.argv[1], sys.argv[2]
if int(os.environ["TORCHELASTIC_RESTART_COUNT"]) > 0:
    sys.exit(0)
rank = int(os.environ["RANK"])
if rank == 0 and mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif rank == 0 and mode == "jax":
    import jax

    with socket.socket() as probe:  # a one-process JAX world of its own, on loopback
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=1, process_id=0)
path = os.path.join(directory, f"rank-{rank}.pid")
with open(path + ".tmp", "w") as out:
    out.write(f"{os.getpid()}\n")
os.replace(path + ".tmp", path)
time.sleep(300)
