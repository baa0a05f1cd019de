"""The training program under torchft: each DDP rank a replica group of one, healed from a live peer.

torchft's unit of fault tolerance is the replica group: the survivors of a lost group train on
without it (``min_replica_size=1``), and a restarted group (its own torchrun restarts it) copies
the live state from a peer before it steps again. So the 2-rank job is 2 replica groups of one
rank each (``REPLICA_GROUP_ID`` 0 and 1, the replayer's ranks), each a torchft ``Manager`` over
a ``ProcessGroupGloo`` with ``BENCH_TIMEOUT``, the model in torchft's
``PureDistributedDataParallel`` (its ``DistributedDataParallel`` crashes the survivor when a peer
dies: ``assert fut._fut`` in its communication hook, torchft 0.2.0 on torch 2.13) and the
optimizer in its ``Optimizer``, which steps only when the quorum commits.

torchft heals from a live peer only; for the loss of every replica (a lost machine, a killed
driver) its users keep a checkpoint of their own: the participant of rank 0 ``torch.save`` s the
model, the optimizer and the ``Manager``'s step to ``BENCH_CHECKPOINT_DIR/torchft.pt`` (replaced
atomically) every ``BENCH_CHECKPOINT_EVERY`` steps and on a notice, and a starting replica loads
it before joining (a live peer ahead of it then heals it).

The log, the control files and the settings are ``train_ddp.py``'s. A committed step is logged
by the participant of rank 0, with ``participants`` (1 while a replica group is lost: the step
then trained half the global batch, which the truth, counting steps, does not see). Each
replica stops on its own after the step that passed ``end_at``.
"""

from __future__ import annotations

import io
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from goodput.train_ddp import FEATURES, _append, _end_at, _env, raise_if_injected, register  # noqa: E402

CHECKPOINT_NAME = "torchft.pt"


def main() -> int:
    """Join the lighthouse's quorum as replica group ``REPLICA_GROUP_ID``, train until the end."""
    from torchft import Manager, Optimizer, ProcessGroupGloo
    from torchft.ddp import PureDistributedDataParallel

    replica = int(os.environ["REPLICA_GROUP_ID"])
    register(replica)
    control, log = Path(os.environ["BENCH_CONTROL"]), Path(os.environ["BENCH_LOG"])
    path = Path(os.environ["BENCH_CHECKPOINT_DIR"]) / CHECKPOINT_NAME
    step_s = float(_env("BENCH_STEP_TIME", "0.2"))
    every = int(_env("BENCH_CHECKPOINT_EVERY", "10"))
    cost_s = float(_env("BENCH_CHECKPOINT_COST", "0"))
    timeout = timedelta(seconds=float(_env("BENCH_TIMEOUT", "30")))
    torch.manual_seed(0)
    module = torch.nn.Linear(FEATURES, FEATURES)
    inner = torch.optim.SGD(module.parameters(), lr=0.01)

    def state_dict() -> dict[str, Any]:
        return {"model": module.state_dict(), "optimizer": inner.state_dict()}

    def load_state_dict(state: dict[str, Any]) -> None:
        module.load_state_dict(state["model"])
        inner.load_state_dict(state["optimizer"])

    manager = Manager(
        pg=ProcessGroupGloo(timeout=timeout), min_replica_size=1, load_state_dict=load_state_dict,
        state_dict=state_dict, replica_id=f"replica{replica}", timeout=timeout,
    )
    if path.exists():
        saved = torch.load(path, weights_only=True)
        load_state_dict(saved["user"])
        manager.load_state_dict(saved["torchft"])
    model = PureDistributedDataParallel(manager, module)
    optimizer = Optimizer(manager, inner)
    notices_seen = {p.name for p in control.glob("notice*")}  # those before this start are old
    while True:
        raise_if_injected(control, f"replica {replica}", manager.current_step() + 1)
        before = manager.current_step()
        optimizer.zero_grad()  # starts the quorum
        model(torch.randn(8, FEATURES)).sum().backward()
        optimizer.step()  # steps only when the quorum commits
        time.sleep(step_s)
        step = manager.current_step()
        first = manager.participating_rank() == 0
        if step > before and first:
            _append(log, {"step": step, "t": time.time(), "pid": os.getpid(), "participants": manager.num_participants()})
            print(f"step {step}", flush=True)
        notices = {p.name for p in control.glob("notice*")}
        notice, notices_seen = bool(notices - notices_seen), notices_seen | notices
        if step > before and first and (notice or step % every == 0):
            started = time.time()
            buffer = io.BytesIO()
            torch.save({"user": state_dict(), "torchft": manager.state_dict()}, buffer)
            path.with_suffix(".tmp").write_bytes(buffer.getvalue())
            time.sleep(cost_s)
            os.replace(path.with_suffix(".tmp"), path)
            _append(log, {"save": step, "t0": started, "t1": time.time(), "pid": os.getpid()})
        if time.time() >= _end_at(control):
            manager.shutdown(wait=False)
            return 0


if __name__ == "__main__":
    sys.exit(main())
