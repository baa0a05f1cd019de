"""A torch rank with a process group and a checkpoint: ``init_process_group("gloo")``, on attempt 1
``torch.distributed.checkpoint.load`` of what attempt 0 saved in DIR, then ``step 1`` and ``step 2``;
on attempt 0 it saves to DIR and rank 1 exits 3, so the run restarts once.

Usage: torch_startup.py DIR
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

dist.init_process_group("gloo")
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
state = {"w": torch.zeros(64, 64)}
if attempt != "0":
    dcp.load(state, checkpoint_id=sys.argv[1])
for number in (1, 2):
    state["w"] += 1
    print(f"step {number}", flush=True)
    time.sleep(0.3)
if attempt == "0":
    dcp.save(state, checkpoint_id=sys.argv[1])
    dist.barrier()
    if dist.get_rank() == 1:
        sys.exit(3)
    time.sleep(30)  # rank 1's failure ends this rank
dist.destroy_process_group()
