"""A plain gloo DDP script as most are written: only rank 0 prints its steps, ``torch.save``
checkpoints from rank 0, resume from its own file. Attempt 0 trains until it is killed; a later
attempt trains ``STEPS`` more steps and exits 0.

Usage: rank0_ddp.py DIR [STEPS]
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
checkpoint = os.path.join(sys.argv[1], "checkpoint.pt")
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
model = DistributedDataParallel(torch.nn.Linear(64, 64))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
start = 0
if os.path.exists(checkpoint):
    saved = torch.load(checkpoint)
    model.module.load_state_dict(saved["model"])
    start = saved["step"] + 1
step = start
while attempt == 0 or step < start + steps:
    optimizer.zero_grad()
    model(torch.randn(8, 64)).sum().backward()
    optimizer.step()
    if rank == 0:
        print(f"step {step}", flush=True)
        if step % 10 == 0:
            torch.save({"model": model.module.state_dict(), "step": step}, checkpoint + ".tmp")
            os.replace(checkpoint + ".tmp", checkpoint)
    step += 1
    time.sleep(0.05)
dist.destroy_process_group()
