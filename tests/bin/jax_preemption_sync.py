"""A JAX loop that stops at JAX's preemption sync point and exits 0, as MaxText and Orbax users do.

Each step gathers every process's step (a collective), prints ``step N`` and asks
whether the preemption sync point is reached: ``bare``, JAX's own
``multihost_utils.reached_preemption_sync_point(step)`` after a bare
``jax.distributed.initialize()``; ``orbax``, Orbax's
``CheckpointManager.reached_preemption(step)`` (which logs Orbax's "Reached
preemption sync point" line) after ``elastic.worker.jax.initialize()`` (which
needs no rank bootstrap). When it is, rank 0 saves the step (elastic.worker's
JSON checkpoint), every process waits for it and exits 0. Rank 0 also saves
every 10 steps; a fresh attempt starts after the checkpoint it is handed. Each
process writes its pid to OUTDIR/ready-A-R once JAX is up (SIGTERM is JAX's then).

Usage: jax_preemption_sync.py CKPTDIR OUTDIR STEPS PAUSE bare|orbax
"""

import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

from elastic.worker import resume_point, save_json_checkpoint

checkpoints, out, steps, pause, how = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
if how == "orbax":
    import orbax.checkpoint as ocp

    import elastic.worker.jax

    elastic.worker.jax.initialize()
    manager = ocp.CheckpointManager(out / f"orbax-{os.environ['ELASTIC_ATTEMPT']}")
    reached = manager.reached_preemption
else:
    jax.distributed.initialize()
    reached = multihost_utils.reached_preemption_sync_point
rank = jax.process_index()
(out / f"ready-{os.environ['ELASTIC_ATTEMPT']}-{rank}").write_text(str(os.getpid()))
start = resume_point()
first = 0 if start is None else start.step + 1
for step in range(first, steps):
    multihost_utils.process_allgather(jnp.array([step]))
    print(f"step {step}", flush=True)
    if reached(step):
        if rank == 0:
            save_json_checkpoint(checkpoints, step, {"step": step})
        multihost_utils.sync_global_devices("saved")
        print(f"stopping at step {step}: the preemption sync point", flush=True)
        sys.exit(0)
    if rank == 0 and step % 10 == 9:
        save_json_checkpoint(checkpoints, step, {"step": step})
    time.sleep(pause)
jax.distributed.shutdown()
