"""A GPU script's first lines, as a new user runs them on a machine where torch has no CUDA.

Usage: asks_for_cuda.py set-device|nccl|gloo-bad-address

set-device: torch.cuda.set_device(LOCAL_RANK); nccl: init_process_group("nccl");
gloo-bad-address: init_process_group("gloo") with MASTER_ADDR a name that does not resolve.
Each error is torch's own, raised from the script's own line and printed by Python.
"""

import os
import sys

import torch
import torch.distributed as dist

case = sys.argv[1]
if case == "set-device":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
elif case == "nccl":
    dist.init_process_group("nccl")
elif case == "gloo-bad-address":
    os.environ["MASTER_ADDR"] = "no-such-host.invalid"
    dist.init_process_group("gloo")
