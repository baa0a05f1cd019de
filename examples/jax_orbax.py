r"""JAX + Orbax training under `elastic`: multi-process data parallelism, Orbax checkpoints, exact resumption.

Run it under the launcher (CPU here; the same script runs on GPUs)::

    JAX_PLATFORMS=cpu python -m elastic run --nproc-per-node 2 --max-restarts 3 \
        --checkpoint-dir "$PWD/ckpt" -- \
        python examples/jax_orbax.py --output final.npz '{resume_step?--resume-step}'

Each rank joins JAX's distributed runtime with ``elastic.worker.jax.initialize()``
(the coordinator, the number of processes and this process's id from the
launcher's variables), holds one device, and trains a small MLP on its half of
every global batch: the gradient is a mean over the whole batch, so the
processes all-reduce every step. Orbax's ``CheckpointManager`` saves the
parameters and the momentum every ``--save-every`` steps into numbered step
directories of ``--checkpoint-dir`` (elastic's ``ELASTIC_CHECKPOINT_DIR``),
committing each by a rename once every process has written its part; elastic
hands the newest committed one back on a restart (``--resume-step``, from the
command's ``{resume_step?--resume-step}``), and the script checks that it is
Orbax's own ``latest_step()`` before restoring it. Everything is seeded and a
step is a function of the step number alone, so ``final.npz`` is
bit-identical to an uninterrupted run's.

On SIGTERM (a preemption notice, or `elastic run` stopping), JAX's preemption
service marks a step every process reaches together; Orbax's
``reached_preemption(step)`` turns true there, the manager saves that step,
and the script exits with status 143 (128 + SIGTERM) once the save is committed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import elastic.worker.jax

FEATURES, HIDDEN, SAMPLES = 8, 32, 256
State = dict[str, Any]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="training steps (default: 40)")
    parser.add_argument("--save-every", type=int, default=5, help="steps between checkpoints (default: 5)")
    parser.add_argument("--batch-size", type=int, default=16, help="samples per process and step (default: 16)")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate (default: 0.05)")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default: 0.9)")
    parser.add_argument("--seed", type=int, default=0, help="seeds weights, data and batches (default: 0)")
    parser.add_argument("--checkpoint-dir", type=Path, default=os.environ.get("ELASTIC_CHECKPOINT_DIR"),
                        help="Orbax's directory (default: $ELASTIC_CHECKPOINT_DIR, elastic's --checkpoint-dir)")
    parser.add_argument("--resume-step", type=int, help="the step to restore (elastic's {resume_step?--resume-step})")
    parser.add_argument("--output", type=Path, required=True, help="where process 0 writes the final parameters (.npz)")
    parser.add_argument("--step-seconds", type=float, default=0.0,
                        help="sleep after each step, to give a test time to kill a rank mid-run (default: 0)")
    parser.add_argument("--on-peer-loss", choices=("exit", "raise"), default="exit",
                        help="when a step's collective fails: exit at once (default), or raise as a plain "
                        "script would (it then hangs in Orbax's save until SIGKILL; for comparison)")
    args = parser.parse_args(argv)
    if args.checkpoint_dir is None:
        parser.error("--checkpoint-dir (or elastic's --checkpoint-dir) is required")
    if min(args.steps, args.save_every, args.batch_size) < 1:
        parser.error("--steps, --save-every and --batch-size must be at least 1")
    return args


def init_state(seed: int) -> State:
    """The same initial parameters and zero momentum in every process."""
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    params = {
        "w1": jax.random.normal(k1, (FEATURES, HIDDEN)) / np.sqrt(FEATURES),
        "b1": jnp.zeros(HIDDEN),
        "w2": jax.random.normal(k2, (HIDDEN, 1)) / np.sqrt(HIDDEN),
        "b2": jnp.zeros(1),
    }
    return {"params": params, "momentum": jax.tree.map(jnp.zeros_like, params)}


def make_data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A fixed synthetic regression set, ``y = sin(x @ w) + noise``, identical in every process."""
    rng = np.random.default_rng(seed + 1)
    inputs = rng.standard_normal((SAMPLES, FEATURES)).astype(np.float32)
    weights = rng.standard_normal((FEATURES, 1)).astype(np.float32)
    targets = (np.sin(inputs @ weights) + 0.1 * rng.standard_normal((SAMPLES, 1))).astype(np.float32)
    return inputs, targets


def local_batch(step: int, process: int, processes: int, batch_size: int, seed: int) -> np.ndarray:
    """This process's sample indices for ``step``: a seeded shuffle per epoch, a function of the step alone."""
    global_batch = batch_size * processes
    per_epoch = SAMPLES // global_batch
    if per_epoch < 1:
        raise ValueError(f"--batch-size {batch_size} x {processes} processes exceeds {SAMPLES} samples")
    epoch, position = divmod(step - 1, per_epoch)
    order = np.random.default_rng(seed * 1_000_003 + epoch).permutation(SAMPLES)
    window = order[position * global_batch : (position + 1) * global_batch]
    return window[process * batch_size : (process + 1) * batch_size]


def loss_fn(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)


def make_train_step(lr: float, momentum: float) -> Callable[[State, jax.Array, jax.Array], tuple[State, jax.Array]]:
    """One SGD-with-momentum step on the global batch (its mean gradient all-reduces across processes)."""

    @jax.jit
    def train_step(state: State, x: jax.Array, y: jax.Array) -> tuple[State, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, y)
        velocity = jax.tree.map(lambda v, g: momentum * v + g, state["momentum"], grads)
        params = jax.tree.map(lambda p, v: p - lr * v, state["params"], velocity)
        return {"params": params, "momentum": velocity}, loss

    return train_step


def restore(manager: ocp.CheckpointManager, step: int, target: State) -> State:
    """Orbax's ``step``, after checking it is Orbax's own latest step (what elastic chose must agree)."""
    latest = manager.latest_step()
    # Worded without "step=N": a launcher reading steps from the output would take it for a trained step.
    print(f"resume: elastic chose checkpoint {step}, orbax's latest is {latest}", flush=True)
    if latest != step:
        raise RuntimeError(f"elastic resumes from step {step}, Orbax's latest step is {latest}")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
    restored: State = manager.restore(step, args=ocp.args.StandardRestore(abstract))
    return restored


def write_output(path: Path, state: State) -> None:
    """Process 0 writes the final parameters, atomically (a rename)."""
    arrays = {name: np.asarray(value.addressable_data(0)) for name, value in state["params"].items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp.npz")
    np.savez(partial, **arrays)
    os.replace(partial, path)


def exit_now(step: int) -> NoReturn:
    """A step's collective failed: a peer is gone. Exit at once, skipping interpreter shutdown.

    A normal exit would wait for Orbax's background save, which waits in a barrier for the
    dead peer (up to Orbax's timeout), and `elastic run`'s SIGTERM cannot cut that short:
    JAX's preemption service has taken SIGTERM over. Nothing is lost: a save the dead peer
    was part of can never commit, and elastic restarts everyone from the last one that did.
    """
    traceback.print_exc()
    print(f"step {step} failed: a peer process is gone; exiting now", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


def main(argv: list[str] | None = None) -> int:
    """Join JAX's runtime from elastic's variables, train from the resume point, save with Orbax."""
    args = parse_args(argv)
    elastic.worker.jax.initialize()  # coordinator, process count and id from elastic's variables
    process, processes = jax.process_index(), jax.process_count()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, PartitionSpec())
    sharded = NamedSharding(mesh, PartitionSpec("data"))

    # One compiled function, not one compilation per operation: restarts reach their first step sooner.
    state = jax.jit(init_state, static_argnums=0, out_shardings=replicated)(args.seed)
    options = ocp.CheckpointManagerOptions(save_interval_steps=args.save_every, max_to_keep=3)
    manager = ocp.CheckpointManager(args.checkpoint_dir.absolute(), options=options)
    resume = args.resume_step
    if resume is None and os.environ.get("ELASTIC_RESUME_STEP"):
        resume = int(os.environ["ELASTIC_RESUME_STEP"])
    if resume is not None:
        state = restore(manager, resume, state)
    first = (resume or 0) + 1
    print(f"process={process}/{processes} attempt={os.environ.get('ELASTIC_ATTEMPT', '0')} first_step={first}",
          flush=True)

    inputs, targets = make_data(args.seed)
    train_step = make_train_step(args.lr, args.momentum)
    global_shape = (args.batch_size * processes,)
    for step in range(first, args.steps + 1):
        index = local_batch(step, process, processes, args.batch_size, args.seed)
        x = jax.make_array_from_process_local_data(sharded, inputs[index], global_shape + (FEATURES,))
        y = jax.make_array_from_process_local_data(sharded, targets[index], global_shape + (1,))
        try:
            state, loss = train_step(state, x, y)
            print(f"step {step} loss={float(loss):.6f}", flush=True)
            # Saves every --save-every steps, and at the step where JAX's preemption service
            # agreed to stop after a SIGTERM (Orbax's default policy includes the preemption point).
            manager.save(step, args=ocp.args.StandardSave(state))
            preempted = manager.reached_preemption(step)
        except jax.errors.JaxRuntimeError:
            if args.on_peer_loss == "raise":
                raise
            exit_now(step)
        if preempted:
            manager.wait_until_finished()
            print(f"preempted: saved step {step}, exiting", flush=True)
            manager.close()
            return 128 + signal.SIGTERM
        if args.step_seconds:
            time.sleep(args.step_seconds)
    manager.wait_until_finished()
    manager.close()
    if process == 0:
        write_output(args.output, state)
        print(f"done: wrote {args.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
