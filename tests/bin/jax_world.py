"""A rank of a two-process JAX job: a bare ``jax.distributed.initialize()`` and one collective,
then ``wait``: create READY and sleep (at most 300 s), the survivor, whose SIGTERM JAX's
preemption service now catches; or ``exit``: wait for READY and die with status 3 at once
(``os._exit``: no interpreter shutdown, whose JAX barrier would wait for the survivor).

Usage: jax_world.py READY wait|exit
"""

import os
import sys
import time

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

ready, role = sys.argv[1], sys.argv[2]
jax.distributed.initialize()
multihost_utils.process_allgather(jnp.array([jax.process_index()]))  # the world is up, both in it
deadline_at = time.monotonic() + 300
if role == "wait":
    open(ready, "w").close()
    while time.monotonic() < deadline_at:
        time.sleep(1)
else:
    while not os.path.exists(ready) and time.monotonic() < deadline_at:
        time.sleep(0.01)
    os._exit(3)
