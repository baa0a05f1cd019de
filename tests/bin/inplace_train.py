"""A DDP rank (gloo) on elastic.worker.inplace: seeded, a batch that is a function of the step, dropout.

Args: STEPS OUTPUT PROGRESS [STEP_S]. Each finished step appends ``step generation pid time`` to
PROGRESS; the rank that is rank 0 at the end saves the model's state dict to OUTPUT. With
``RAISE_AT_STEP`` set, the rank raises a ValueError in that step of generation 0 (a bug of its own).
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from elastic.worker.inplace import InPlace

FEATURES, HIDDEN, SAMPLES, PER_RANK = 8, 32, 256, 16

steps, output, progress = int(sys.argv[1]), sys.argv[2], sys.argv[3]
step_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
raise_at = int(os.environ.get("RAISE_AT_STEP", "0"))
torch.use_deterministic_algorithms(True)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Dropout(0.2), nn.Linear(HIDDEN, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
data = torch.Generator().manual_seed(1)
inputs, targets = torch.randn(SAMPLES, FEATURES, generator=data), torch.randn(SAMPLES, 1, generator=data)

rank = -1
inplace = InPlace(model, optimizer, timeout_s=120, notice_wait_s=60)
for generation in inplace.generations():
    with generation:
        rank, world = dist.get_rank(), dist.get_world_size()
        ddp = DistributedDataParallel(model)
        for step in generation.steps(steps):
            order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(step))
            batch = order[: PER_RANK * world][rank::world]
            optimizer.zero_grad()
            nn.functional.mse_loss(ddp(inputs[batch]), targets[batch]).backward()
            optimizer.step()
            if step == raise_at and generation.number == 0:
                raise ValueError(f"a bug of this rank's own at step {step}")
            with open(progress, "a", encoding="utf-8") as file:
                file.write(f"{step} {generation.number} {os.getpid()} {time.time()}\n")
            time.sleep(step_s)
if rank == 0:
    torch.save(model.state_dict(), output)
