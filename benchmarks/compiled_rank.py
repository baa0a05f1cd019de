"""A rank whose training step is compiled (JAX's jit or torch.compile over DDP), for bench_compile_caches.py.

Usage: compiled_rank.py jax|torch. Under ``elastic run`` (``ELASTIC_RUN_ID`` set) JAX starts with
``elastic.worker.jax.initialize()``; under torchrun from ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``
and ``MASTER_PORT``. torch uses gloo on CPU. Before the framework is imported, ``TMPDIR`` becomes
``BENCH_TMP/attempt-A-rank-R`` (new each attempt: a replacement node's cold ``/tmp``) when
``BENCH_TMP`` is set. Each step prints ``step N``; on attempt 0 rank ``WORLD_SIZE-1`` appends
``{"ev": "killed", "t": WALL}`` to ``BENCH_EVENTS`` after step ``BENCH_KILL_AT_STEP`` (default 3),
or the first step after it that ends ``BENCH_KILL_AFTER`` seconds (default 0) after the rank started,
and SIGKILLs itself. Between steps a rank sleeps ``BENCH_STEP_TIME`` (0.2 s), where a SIGTERM
exits 143 at once under both launchers (JAX's preemption service would otherwise swallow it, and a
rank that ran to its end would hang in JAX's shutdown waiting for the dead peer until SIGKILL:
torchrun's 30 s, elastic's `--failure-grace` 5 s, which is not what this benchmark compares).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time

ATTEMPT = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
STEPS = int(os.environ.get("BENCH_STEPS", "1000"))  # the benchmark stops the launcher once it has measured
STEP_TIME_S = float(os.environ.get("BENCH_STEP_TIME", "0.2"))  # a sleep between steps, where SIGTERM lands
KILL_AT = int(os.environ.get("BENCH_KILL_AT_STEP", "3"))
KILL_AFTER_S = float(os.environ.get("BENCH_KILL_AFTER", "0"))  # late enough for --prewarm to be ready
LAYERS = int(os.environ.get("BENCH_LAYERS", "16"))  # JAX: compile time grows with it
STARTED = time.monotonic()

if "BENCH_TMP" in os.environ:
    fresh = os.path.join(os.environ["BENCH_TMP"], f"attempt-{ATTEMPT}-rank-{RANK}")
    os.makedirs(fresh, exist_ok=True)
    os.environ["TMPDIR"] = fresh
    tempfile.tempdir = None


def exit_on_sigterm() -> None:
    signal.signal(signal.SIGTERM, lambda _signum, _frame: os._exit(128 + signal.SIGTERM))


def after_step(step: int) -> None:
    print(f"step {step}", flush=True)
    time.sleep(STEP_TIME_S)
    if ATTEMPT == 0 and RANK == WORLD - 1 and step >= KILL_AT and time.monotonic() - STARTED >= KILL_AFTER_S:
        fd = os.open(os.environ["BENCH_EVENTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, (json.dumps({"ev": "killed", "rank": RANK, "t": time.time()}) + "\n").encode())
        os.kill(os.getpid(), signal.SIGKILL)


def run_jax() -> None:
    started = time.monotonic()
    import jax
    import jax.numpy as jnp
    from jax import monitoring

    cache = {"hits": 0, "misses": 0}

    def listen(event: str, **_: object) -> None:
        for name in cache:
            if event == f"/jax/compilation_cache/cache_{name}":
                cache[name] += 1

    monitoring.register_event_listener(listen)
    imported = time.monotonic()

    if "ELASTIC_RUN_ID" in os.environ:
        import elastic.worker.jax

        elastic.worker.jax.initialize()
    else:
        jax.distributed.initialize(
            coordinator_address=f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
            num_processes=WORLD, process_id=RANK, cluster_detection_method="deactivate",
        )
    exit_on_sigterm()
    initialized = time.monotonic()

    def loss(ws: list[jax.Array], x: jax.Array) -> jax.Array:
        for w in ws:
            x = jnp.tanh(x @ w) + jnp.sin(x) * 0.1
        return jnp.mean(x**2)

    @jax.jit
    def step(ws: list[jax.Array], x: jax.Array) -> list[jax.Array]:
        grads = jax.grad(loss)(ws, x)
        return [w - 0.01 * g for w, g in zip(ws, grads)]

    ws = [jnp.full((32, 32), 0.01) for _ in range(LAYERS)]
    x = jnp.ones((8, 32))
    for n in range(1, STEPS + 1):
        ws = step(ws, x)
        jax.block_until_ready(ws)
        if n == 1:
            print(f"timing: import {imported - started:.2f}s, initialize {initialized - imported:.2f}s, "
                  f"first step {time.monotonic() - initialized:.2f}s; persistent cache "
                  f"hits {cache['hits']} misses {cache['misses']}", file=sys.stderr, flush=True)
        after_step(n)


def run_torch() -> None:
    started = time.monotonic()
    import torch
    import torch.distributed as dist
    from torch._dynamo.utils import counters
    from torch.nn.parallel import DistributedDataParallel

    imported = time.monotonic()
    dist.init_process_group("gloo")
    exit_on_sigterm()
    initialized = time.monotonic()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    # The module inside DDP is compiled: torch.compile(DDP(net)) breaks the graph at DDP's
    # forward in torch 2.13 and leaves the module to run eagerly, with inductor never called.
    model = DistributedDataParallel(torch.compile(net))
    compiled = model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32)
    for n in range(1, STEPS + 1):
        optimizer.zero_grad()
        compiled(x).pow(2).mean().backward()
        optimizer.step()
        if n == 1:
            inductor = counters["inductor"]
            print(f"timing: import {imported - started:.2f}s, initialize {initialized - imported:.2f}s, "
                  f"first step {time.monotonic() - initialized:.2f}s; fx graph cache "
                  f"hits {inductor['fxgraph_cache_hit']} misses {inductor['fxgraph_cache_miss']}",
                  file=sys.stderr, flush=True)
        after_step(n)
    dist.destroy_process_group()


if __name__ == "__main__":
    {"jax": run_jax, "torch": run_torch}[sys.argv[1]]()
    sys.exit(0)
