"""A rank of a two-process JAX job: a bare ``jax.distributed.initialize()`` and one collective,
then ``wait``: create READY and sleep (at most 300 s), the survivor, whose SIGTERM JAX's
preemption service now catches; ``save``: the same survivor with a SIGTERM handler of its own,
installed after JAX's, that saves for a second (writes READY.saved) and exits 143; or ``exit``:
wait for READY and die with status 3 at once (``os._exit``: no interpreter shutdown, whose JAX
barrier would wait for the survivor).

Usage: jax_world.py READY wait|save|exit
"""

import os
import signal
import sys
import time

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

ready, role = sys.argv[1], sys.argv[2]
jax.distributed.initialize()
multihost_utils.process_allgather(jnp.array([jax.process_index()]))  # the world is up, both in it
deadline_at = time.monotonic() + 300
if role == "save":

    def save(signum: int, _frame: object) -> None:
        time.sleep(1.0)
        open(ready + ".saved", "w").close()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, save)
if role in ("wait", "save"):
    open(ready, "w").close()
    while time.monotonic() < deadline_at:
        time.sleep(1)
else:
    while not os.path.exists(ready) and time.monotonic() < deadline_at:
        time.sleep(0.01)
    os._exit(3)
