"""A rank of a two-process JAX job: a bare ``jax.distributed.initialize()``, then STEPS steps, each
one collective (every process's step and index gathered) printed as ``step N`` 0.05 s apart;
then each process writes the sum of everything it gathered to OUTDIR/final-R.txt and exits 0.

Usage: jax_steps.py OUTDIR STEPS
"""

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

out, steps = Path(sys.argv[1]), int(sys.argv[2])
jax.distributed.initialize()
me = jax.process_index()
total = 0
for step in range(1, steps + 1):
    gathered = multihost_utils.process_allgather(jnp.array([step * 10 + jax.process_index()]))
    total += int(gathered.sum())
    print(f"step {step}", flush=True)
    time.sleep(0.05)
(out / f"final-{me}.txt").write_text(str(total))
