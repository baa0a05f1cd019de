"""A JAX rank with every start-up phase: a bare ``jax.distributed.initialize()``, a jitted step (read
from the persistent compilation cache on attempt 1), then ``step 1`` and ``step 2``; rank 1 exits 3
after its steps on attempt 0, so the run restarts once."""

import os
import sys
import time

import jax
import jax.numpy as jnp

jax.distributed.initialize()


@jax.jit
def step(w: jax.Array, x: jax.Array) -> jax.Array:
    for _ in range(4):
        w = w - 0.01 * jax.grad(lambda v: jnp.sum(jnp.tanh(x @ v) ** 2))(w)
    return w


w = step(jnp.ones((16, 16)), jnp.ones((8, 16)))
w.block_until_ready()
for number in (1, 2):
    print(f"step {number}", flush=True)
    time.sleep(0.3)
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["RANK"] == "1":
    sys.exit(3)
jax.distributed.shutdown()
