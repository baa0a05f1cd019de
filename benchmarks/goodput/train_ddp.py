"""The training program every launcher runs: a gloo DDP job that logs each committed step, the truth.

Each launcher's own usual way to checkpoint and resume (``BENCH_FLAVOUR``):

- ``elastic``: rank 0 writes ``step_N`` with :func:`elastic.worker.atomic_checkpoint` into
  ``--checkpoint-dir``; every rank loads :func:`elastic.worker.resume_point`. On elastic's
  preemption notice (:func:`elastic.worker.preemption_requested`) the ranks save and exit 0, as
  ``docs/failures/preemption.md`` shows.
- ``torchrun``: rank 0 ``torch.save`` s to ``BENCH_CHECKPOINT_DIR/checkpoint.pt`` (a temporary
  file replaced atomically); every rank loads it if it is there.
- ``ray``: ``ray.train.report`` with a ``Checkpoint`` from rank 0; resume from
  ``ray.train.get_checkpoint()`` (run by ``ray_train.py``'s ``TorchTrainer``).

With no notice from its launcher (torchrun and Ray Train have none to give on one machine), a
program polls the notice the machine's metadata would give (``BENCH_CONTROL/notice``), saves
at once and trains on, as users of a spot instance do.

What the replayer needs of it, the same under every launcher: each rank appends its pid to
``BENCH_CONTROL/pids.jsonl`` when it starts; before each step it looks for
``BENCH_CONTROL/raise-PID`` (its own pid) and, if it is there, takes it and raises. Rank 0 appends each
committed step (``{"step", "t", "pid"}``) and each checkpoint (``{"save", "t0", "t1",
"pid"}``) to ``BENCH_LOG`` and prints ``step N``. Every rank stops after the step at which
the wall clock passed the time in ``BENCH_CONTROL/end_at`` (written by the runner; the ranks agree
on it in one all-reduce a step).
Under NVIDIA's ``ft_launcher`` (a torchrun fork, torchrun's way to checkpoint) each step also sends
its rank monitor a heartbeat (:func:`nvrx_heartbeat`).
Other settings: ``BENCH_STEP_TIME`` (seconds of sleep a step), ``BENCH_CHECKPOINT_EVERY``
(steps), ``BENCH_CHECKPOINT_COST`` (seconds rank 0 sleeps inside each save, the cost of a
larger model's), ``BENCH_TIMEOUT`` (the process group's timeout, seconds).
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

FEATURES = 64


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def _append(path: Path, line: dict[str, Any]) -> None:
    with open(path, "a") as out:  # one write a line: lines of two processes do not interleave
        out.write(json.dumps(line) + "\n")


def _state(model: DistributedDataParallel, optimizer: torch.optim.Optimizer, step: int) -> dict[str, Any]:
    return {"step": step, "model": model.module.state_dict(), "optimizer": optimizer.state_dict()}


def _load(state: dict[str, Any], model: DistributedDataParallel, optimizer: torch.optim.Optimizer) -> int:
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])


class Checkpoints:
    """One launcher's usual way to save and resume."""

    def __init__(self, flavour: str, rank: int) -> None:
        self.flavour, self.rank = flavour, rank
        self.cost_s = float(_env("BENCH_CHECKPOINT_COST", "0"))

    def resume(self, model: DistributedDataParallel, optimizer: torch.optim.Optimizer) -> int:
        """Load the newest checkpoint; the step it holds (0 without one)."""
        if self.flavour == "elastic":
            from elastic.worker import resume_point

            point = resume_point()
            if point is None:
                return 0
            return _load(torch.load(point.path / "state.pt", weights_only=True), model, optimizer)
        if self.flavour == "torchrun":
            path = Path(os.environ["BENCH_CHECKPOINT_DIR"]) / "checkpoint.pt"
            return _load(torch.load(path, weights_only=True), model, optimizer) if path.exists() else 0
        import ray.train

        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return 0
        with checkpoint.as_directory() as directory:
            return _load(torch.load(Path(directory) / "state.pt", weights_only=True), model, optimizer)

    def save(self, model: DistributedDataParallel, optimizer: torch.optim.Optimizer, step: int) -> None:
        """Write ``step``, rank 0's ``BENCH_CHECKPOINT_COST`` included; every rank returns once it is kept."""
        if self.flavour == "ray":
            import ray.train

            with tempfile.TemporaryDirectory() as directory:
                checkpoint = None
                if self.rank == 0:
                    torch.save(_state(model, optimizer, step), Path(directory) / "state.pt")
                    time.sleep(self.cost_s)
                    checkpoint = ray.train.Checkpoint.from_directory(directory)
                ray.train.report({"step": step}, checkpoint=checkpoint)
            return
        if self.rank == 0:
            if self.flavour == "elastic":
                from elastic.worker import atomic_checkpoint, checkpoint_dir

                with atomic_checkpoint(checkpoint_dir() or Path("checkpoints"), step) as tmp:
                    torch.save(_state(model, optimizer, step), tmp / "state.pt")
                    time.sleep(self.cost_s)
            else:
                path = Path(os.environ["BENCH_CHECKPOINT_DIR"]) / "checkpoint.pt"
                buffer = io.BytesIO()
                torch.save(_state(model, optimizer, step), buffer)
                path.with_suffix(".tmp").write_bytes(buffer.getvalue())
                time.sleep(self.cost_s)
                os.replace(path.with_suffix(".tmp"), path)
        dist.barrier()


def committed(log: Path, rank: int, step: int) -> None:
    """Rank 0 logs the step it committed (the truth) and prints it (what the launchers read)."""
    if rank == 0:
        _append(log, {"step": step, "t": time.time(), "pid": os.getpid()})
        print(f"step {step}", flush=True)


def notice_now(flavour: str, control: Path, seen: set[str]) -> bool:
    """Whether a preemption notice came: elastic's, under elastic; else a notice file of the
    machine's metadata (``BENCH_CONTROL/notice-*``) that was not there when this process started."""
    if flavour == "elastic":
        from elastic.worker import preemption_requested

        return preemption_requested()
    return bool({p.name for p in control.glob("notice*")} - seen)


def raise_if_injected(control: Path, who: str, step: int) -> None:
    """Raise the exception the replayer injected into this process (``BENCH_CONTROL/raise-PID``),
    once, in the step it was about to take. The file names the process, not its rank: one that
    died before its next step never raises, and the rank's next process does not inherit it
    (an exception minutes later in another attempt, which the first sweep had)."""
    claim = control / f"raise-{os.getpid()}"
    if claim.exists():
        try:
            os.rename(claim, control / f"raised-{os.getpid()}")
        except FileNotFoundError:
            return
        raise RuntimeError(f"{who}: the failure injected at step {step}")


def train(flavour: str, rank: int, world_size: int) -> int:
    """Train from the newest checkpoint until the runner's end; 0 when done, or on elastic's notice."""
    control = Path(os.environ["BENCH_CONTROL"])
    log = Path(os.environ["BENCH_LOG"])
    step_s = float(_env("BENCH_STEP_TIME", "0.2"))
    every = int(_env("BENCH_CHECKPOINT_EVERY", "10"))
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(FEATURES, FEATURES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    checkpoints = Checkpoints(flavour, rank)
    step = checkpoints.resume(model, optimizer)
    notices_seen = {p.name for p in control.glob("notice*")}  # those before this start are old
    heartbeat = nvrx_heartbeat()
    while True:
        raise_if_injected(control, f"rank {rank}", step + 1)
        optimizer.zero_grad()
        model(torch.randn(8, FEATURES)).sum().backward()
        optimizer.step()
        time.sleep(step_s)
        step += 1
        heartbeat()
        committed(log, rank, step)
        notice = notice_now(flavour, control, notices_seen)
        flags = torch.tensor([float(time.time() >= _end_at(control)), float(notice)])
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        if flags[1] and flavour != "elastic":  # a peer saw it first: one save for it, not two
            notices_seen |= {p.name for p in control.glob("notice*")}
        if flags[1] or step % every == 0:
            started = time.time()
            checkpoints.save(model, optimizer, step)
            if rank == 0:
                _append(log, {"save": step, "t0": started, "t1": time.time(), "pid": os.getpid()})
            if flags[1] and flavour == "elastic":
                return 0  # elastic ends the attempt to be requeued (exit status 75)
        if flags[0]:
            return 0


def nvrx_heartbeat() -> Callable[[], None]:
    """Under NVIDIA's ``ft_launcher`` (its rank monitor's socket in the environment), what its users
    add to a step: a ``RankMonitorClient`` heartbeat, which its launcher watches for hangs."""
    if "FT_RANK_MONITOR_IPC_SOCKET" not in os.environ:
        return lambda: None
    from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

    client = RankMonitorClient()
    client.init_workload_monitoring()
    return client.send_heartbeat


def _end_at(control: Path) -> float:
    """When to stop: the runner's ``end_at`` file (not there yet: not before the schedule starts)."""
    try:
        return float((control / "end_at").read_text())
    except (FileNotFoundError, ValueError):
        return float("inf")


def register(rank: int) -> None:
    """Tell the replayer this process is ``rank`` (every launcher's ranks do it alike), with its
    start time in clock ticks (``/proc/PID/stat``'s 22nd field), which a reused pid would not have."""
    start = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
    line = {"rank": rank, "pid": os.getpid(), "start": int(start), "t": time.time()}
    _append(Path(os.environ["BENCH_CONTROL"]) / "pids.jsonl", line)


def main() -> int:
    """Under elastic or torchrun: the rank from the environment, a gloo group, train."""
    flavour = os.environ["BENCH_FLAVOUR"]
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    register(rank)
    timeout = timedelta(seconds=float(_env("BENCH_TIMEOUT", "30")))
    dist.init_process_group("gloo", timeout=timeout)
    try:
        return train(flavour, rank, world_size)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
