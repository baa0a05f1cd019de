"""A JAX rank whose jitted step compiles; it prints JAX's own persistent-cache events, then `step 1`.

Usage: jax_cached_step.py [--fail-on-attempt A] [--own-cache DIR | --own-cache-env DIR]: exit 3
after the step on attempt A (default 0). --own-cache: the program sets its own cache folder with
jax.config.update("jax_compilation_cache_dir", DIR), as MaxText's jax_cache_dir does;
--own-cache-env: it sets JAX_COMPILATION_CACHE_DIR=DIR in its environment before importing JAX.
The line ``cache: hits=H misses=M dir=D`` counts JAX's monitoring events
(``/jax/compilation_cache/cache_hits`` and ``cache_misses``) over everything this process compiled.
"""

import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--fail-on-attempt", type=int, default=0)
parser.add_argument("--own-cache")
parser.add_argument("--own-cache-env")
args = parser.parse_args()
if args.own_cache_env:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = args.own_cache_env

import jax  # noqa: E402 - after the program's own environment
import jax.numpy as jnp  # noqa: E402
from jax import monitoring  # noqa: E402

if args.own_cache:
    jax.config.update("jax_compilation_cache_dir", args.own_cache)
counts = {"hits": 0, "misses": 0}


def listen(event: str, **_: object) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        counts["hits"] += 1
    elif event == "/jax/compilation_cache/cache_misses":
        counts["misses"] += 1


monitoring.register_event_listener(listen)


@jax.jit
def step(w: jax.Array, x: jax.Array) -> jax.Array:
    for _ in range(4):
        w = w - 0.01 * jax.grad(lambda v: jnp.sum(jnp.tanh(x @ v) ** 2))(w)
    return w


w = step(jnp.ones((16, 16)), jnp.ones((8, 16)))
w.block_until_ready()
print(f"cache: hits={counts['hits']} misses={counts['misses']} dir={jax.config.jax_compilation_cache_dir}", flush=True)
print("step 1", flush=True)
sys.exit(3 if int(os.environ["TORCHELASTIC_RESTART_COUNT"]) == args.fail_on_attempt else 0)
