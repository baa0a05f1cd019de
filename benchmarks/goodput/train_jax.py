"""The JAX training program every launcher runs: 2 processes on CPU, Orbax checkpoints, the same log as ``train_ddp.py``.

A data-parallel MLP (``examples/jax_orbax.py``'s model): each process holds one CPU device and
half of every global batch; the jitted step's mean gradient all-reduces across the processes.
How each launcher's user joins JAX's distributed runtime (``BENCH_FLAVOUR``):

- ``elastic``: a bare ``jax.distributed.initialize()``; elastic's rank bootstrap gives JAX the
  coordinator, the process count and this process's id.
- ``torchrun`` (and NVIDIA's ``ft_launcher``, a torchrun fork, whose rank monitor also gets a
  heartbeat each step): torchrun sets no variable JAX reads, so the user maps its own:
  ``coordinator_address`` from ``MASTER_ADDR`` and ``MASTER_PORT`` + 1 (torchrun's store may
  hold ``MASTER_PORT`` itself), ``num_processes`` from ``WORLD_SIZE``, ``process_id`` from ``RANK``.

Either way ``heartbeat_timeout_seconds`` is ``BENCH_TIMEOUT``, the counterpart of the DDP
program's process-group timeout: how long a hung (SIGSTOPped) peer goes unnoticed.

Checkpoints are Orbax's ``CheckpointManager`` (synchronous saves, two kept), every process
writing its part and Orbax committing the step by a rename, into ``ELASTIC_CHECKPOINT_DIR``
under elastic (which hands the newest committed step back in ``ELASTIC_RESUME_STEP``) or
``BENCH_CHECKPOINT_DIR/orbax`` under torchrun (``manager.latest_step()``, Orbax's own way to
resume). ``BENCH_CHECKPOINT_COST`` is slept by process 0 before each save.

What the replayer and the runner need of it is ``train_ddp.py``'s (its docstring): ranks
register their pids, take ``BENCH_CONTROL/raise-PID`` and raise, poll the notice files
(under elastic, :func:`elastic.worker.preemption_requested`), stop after the step that passed
``BENCH_CONTROL/end_at`` (agreed in one ``process_allgather`` a step), and rank 0 logs each
committed step and save to ``BENCH_LOG``.

A failure ends the process at once, as ``examples/jax_orbax.py`` does and every launcher's JAX
user must: a raise would go through interpreter shutdown, where JAX's distributed shutdown
waits for the peer (``shutdown_timeout_seconds``); and JAX's preemption service takes SIGTERM
over, so a launcher stopping a survivor would wait out its grace before SIGKILL. So an
exception in the loop (the injected one, or a collective failed by a dead peer) prints its
traceback and exits 1, and SIGTERM exits 143.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from goodput.train_ddp import (  # noqa: E402
    _append, _end_at, _env, committed, notice_now, nvrx_heartbeat, raise_if_injected, register,
)

FEATURES, HIDDEN, BATCH = 8, 32, 16  # BATCH: samples per process and step
ORBAX_SUBDIR = "orbax"  # under BENCH_CHECKPOINT_DIR, for torchrun


def torchrun_coordinator(env: dict[str, str] | os._Environ[str]) -> str:
    """JAX's coordinator from torchrun's variables: ``MASTER_ADDR``, one port above ``MASTER_PORT``."""
    return f"{env['MASTER_ADDR']}:{int(env['MASTER_PORT']) + 1}"


def initialize(flavour: str, timeout_s: int) -> None:
    """Join JAX's distributed runtime the way a user of this launcher writes it."""
    import jax

    if flavour == "elastic":
        jax.distributed.initialize(heartbeat_timeout_seconds=timeout_s)
    elif flavour == "torchrun":
        jax.distributed.initialize(
            coordinator_address=torchrun_coordinator(os.environ),
            num_processes=int(os.environ["WORLD_SIZE"]),
            process_id=int(os.environ["RANK"]),
            heartbeat_timeout_seconds=timeout_s,
        )
    else:
        raise SystemExit(f"BENCH_FLAVOUR={flavour}: the JAX program runs under elastic or torchrun")


def resume_step(flavour: str, latest: int | None, env: dict[str, str] | os._Environ[str]) -> int | None:
    """The step to restore: the one elastic hands back, or Orbax's latest under torchrun."""
    if flavour == "elastic":
        given = env.get("ELASTIC_RESUME_STEP", "")
        return int(given) if given else None
    return latest


def checkpoint_directory(flavour: str, env: dict[str, str] | os._Environ[str]) -> Path:
    """Where Orbax keeps its steps: elastic's checkpoint directory, or one under the benchmark's."""
    if flavour == "elastic":
        return Path(env["ELASTIC_CHECKPOINT_DIR"]).absolute()
    return (Path(env["BENCH_CHECKPOINT_DIR"]) / ORBAX_SUBDIR).absolute()


def train(flavour: str) -> int:
    """Train from the newest checkpoint until the runner's end; 0 when done, or on elastic's notice."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import orbax.checkpoint as ocp
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    control = Path(os.environ["BENCH_CONTROL"])
    log = Path(os.environ["BENCH_LOG"])
    step_s = float(_env("BENCH_STEP_TIME", "0.2"))
    every = int(_env("BENCH_CHECKPOINT_EVERY", "10"))
    cost_s = float(_env("BENCH_CHECKPOINT_COST", "0"))
    rank, processes = jax.process_index(), jax.process_count()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated, sharded = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("data"))

    def init_state() -> dict[str, Any]:
        k1, k2 = jax.random.split(jax.random.PRNGKey(0))
        params = {"w1": jax.random.normal(k1, (FEATURES, HIDDEN)) / np.sqrt(FEATURES), "b1": jnp.zeros(HIDDEN),
                  "w2": jax.random.normal(k2, (HIDDEN, 1)) / np.sqrt(HIDDEN), "b2": jnp.zeros(1)}
        return {"params": params, "momentum": jax.tree.map(jnp.zeros_like, params)}

    def loss_fn(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
        hidden = jnp.tanh(x @ params["w1"] + params["b1"])
        return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)

    @jax.jit
    def train_step(state: dict[str, Any], x: jax.Array, y: jax.Array) -> dict[str, Any]:
        grads = jax.grad(loss_fn)(state["params"], x, y)
        velocity = jax.tree.map(lambda v, g: 0.9 * v + g, state["momentum"], grads)
        return {"params": jax.tree.map(lambda p, v: p - 0.01 * v, state["params"], velocity), "momentum": velocity}

    state = jax.jit(init_state, out_shardings=replicated)()
    options = ocp.CheckpointManagerOptions(max_to_keep=2, enable_async_checkpointing=False)
    manager = ocp.CheckpointManager(checkpoint_directory(flavour, os.environ), options=options)
    step = resume_step(flavour, manager.latest_step(), os.environ) or 0
    if step:
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
        state = manager.restore(step, args=ocp.args.StandardRestore(abstract))
    print(f"process {rank}/{processes}: resuming after step {step}", flush=True)
    rng = np.random.default_rng(rank)
    notices_seen = {p.name for p in control.glob("notice*")}  # those before this start are old
    heartbeat = nvrx_heartbeat()
    while True:
        raise_if_injected(control, f"rank {rank}", step + 1)
        local = rng.standard_normal((BATCH, FEATURES + 1)).astype(np.float32)
        shape = (BATCH * processes,)
        x = jax.make_array_from_process_local_data(sharded, local[:, :FEATURES], shape + (FEATURES,))
        y = jax.make_array_from_process_local_data(sharded, local[:, FEATURES:], shape + (1,))
        state = jax.block_until_ready(train_step(state, x, y))
        time.sleep(step_s)
        step += 1
        heartbeat()
        committed(log, rank, step)
        notice = notice_now(flavour, control, notices_seen)
        mine = np.array([float(time.time() >= _end_at(control)), float(notice)], dtype=np.float32)
        flags = np.asarray(multihost_utils.process_allgather(mine)).reshape(processes, 2).max(axis=0)
        if flags[1] and flavour != "elastic":  # a peer saw it first: one save for it, not two
            notices_seen |= {p.name for p in control.glob("notice*")}
        if flags[1] or step % every == 0:
            started = time.time()
            if rank == 0:
                time.sleep(cost_s)
            manager.save(step, args=ocp.args.StandardSave(state), force=True)
            manager.wait_until_finished()
            if rank == 0:
                _append(log, {"save": step, "t0": started, "t1": time.time(), "pid": os.getpid()})
            if flags[1] and flavour == "elastic":
                return 0  # elastic ends the attempt to be requeued (exit status 75)
        if flags[0]:
            manager.close()
            return 0


def exit_at_once(code: int) -> None:
    """Leave without interpreter shutdown (JAX's would wait for the peer), output flushed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> int:
    """Register, join JAX's runtime as this launcher's user does, train; a failure exits at once."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    flavour = os.environ["BENCH_FLAVOUR"]
    register(int(os.environ["RANK"]))
    initialize(flavour, max(1, round(float(_env("BENCH_TIMEOUT", "30")))))
    signal.signal(signal.SIGTERM, lambda _signum, _frame: exit_at_once(128 + signal.SIGTERM))
    try:
        code = train(flavour)
    except Exception:
        traceback.print_exc()
        exit_at_once(1)
    import jax

    jax.distributed.shutdown()  # every process ended at the same step: the shutdown barrier passes
    exit_at_once(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
