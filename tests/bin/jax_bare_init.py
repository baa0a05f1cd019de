"""A JAX rank as JAX's docs teach it: a bare ``jax.distributed.initialize()``, then one line
``world process=I count=N devices=D sum=S coordinator=ADDR given=ELASTIC_ADDR`` (D: the global
device count, which only one world of N processes shows; S: the sum of every process's index + 1,
gathered from all; ADDR: where JAX connected; ELASTIC_ADDR: the attempt's coordinator)."""

import os

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

jax.distributed.initialize()
from jax._src import distributed  # noqa: E402  where JAX keeps the address it connected to

total = multihost_utils.process_allgather(jnp.array([jax.process_index() + 1])).sum()
print(
    f"world process={jax.process_index()} count={jax.process_count()} devices={jax.device_count()} "
    f"sum={int(total)} coordinator={distributed.global_state.coordinator_address} "
    f"given={os.environ['ELASTIC_COORDINATOR_ADDRESS']}",
    flush=True,
)
jax.distributed.shutdown()
