"""A gloo DDP rank on elastic.worker.inplace for bench_inplace.py: seeded, a batch per step.

Usage: inplace_rank.py STEPS PROGRESS STEP_S. Each finished step appends ``step generation pid
time`` to PROGRESS; a spare (``ELASTIC_INPLACE_SPARE=1``) waits in ``generations()`` for a place.
Rank 1 raises a ValueError in the step after the file ``BENCH_RAISE_FILE`` names appears (and
removes it: one error per file).
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from elastic.worker.inplace import InPlace

steps, progress, step_s = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
raise_file = os.environ.get("BENCH_RAISE_FILE", "")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
inputs = torch.randn(1024, 64, generator=torch.Generator().manual_seed(1))
inplace = InPlace(model, optimizer, timeout_s=120, notice_wait_s=60)
for generation in inplace.generations():
    with generation:
        rank, world = dist.get_rank(), dist.get_world_size()
        ddp = DistributedDataParallel(model)
        for step in generation.steps(steps):
            if rank == 1 and raise_file and os.path.exists(raise_file):
                os.remove(raise_file)
                raise ValueError(f"an error of rank 1's own in step {step}")
            batch = torch.randperm(1024, generator=torch.Generator().manual_seed(step))[: 32 * world][rank::world]
            optimizer.zero_grad()
            ddp(inputs[batch]).pow(2).mean().backward()
            optimizer.step()
            with open(progress, "a", encoding="utf-8") as file:
                file.write(f"{step} {generation.number} {os.getpid()} {time.time()}\n")
            time.sleep(step_s)
