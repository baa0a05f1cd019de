"""Initialize JAX's distributed runtime (a one-process world of its own), create READY, then sleep.

What a surviving rank of a JAX job does: after ``jax.distributed.initialize()`` JAX's
preemption service catches SIGTERM, so the process never exits on it.

Usage: jax_survivor.py READY
"""

import socket
import sys
import time

import jax

with socket.socket() as probe:  # a coordinator of its own, on loopback
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=1, process_id=0)
open(sys.argv[1], "w").close()
deadline_at = time.monotonic() + 300
while time.monotonic() < deadline_at:
    time.sleep(1)
