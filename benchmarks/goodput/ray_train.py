"""The training program under Ray Train v2: a ``TorchTrainer`` of 2 CPU workers with a ``FailureConfig``.

    python benchmarks/goodput/ray_train.py STORAGE NAME [WORKERS]

Starts a Ray of its own on loopback (``ray.init(address="local")``, as a user on one machine does), and runs
``train_ddp.train`` in each worker, checkpointing with ``ray.train.report``. Run again with
the same ``STORAGE`` and ``NAME`` (after its driver or its machine was lost), Ray Train
resumes from the run's latest checkpoint. Failures of workers are retried without limit.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def loop(config: dict[str, str]) -> None:
    """One Ray Train worker: register, then train (Ray Train made the gloo group)."""
    import ray.train

    from goodput import train_ddp

    context = ray.train.get_context()
    rank = context.get_world_rank()
    train_ddp.register(rank)
    train_ddp.train("ray", rank, context.get_world_size())


def main(argv: list[str]) -> int:
    """Fit once; 0 when the workers finished."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    storage, name = argv[0], argv[1]
    workers = int(argv[2]) if len(argv) > 2 else 2
    temp_dir = os.environ.get("BENCH_RAY_TMP")  # short: Ray's socket paths have a limit
    ray.init(  # "local": a Ray of its own, never one another program started on this machine
        address="local", num_cpus=workers + 1, include_dashboard=False, configure_logging=False, _temp_dir=temp_dir or None
    )
    timeout = int(float(os.environ.get("BENCH_TIMEOUT", "30")))
    trainer = TorchTrainer(
        loop,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False),
        torch_config=TorchConfig(backend="gloo", timeout_s=timeout),
        run_config=RunConfig(
            name=name,
            storage_path=storage,
            failure_config=FailureConfig(max_failures=-1),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
        ),
    )
    trainer.fit()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
