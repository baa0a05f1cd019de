"""A GPU script's first lines, as a new user runs them on a machine where torch has no CUDA.

Usage: asks_for_cuda.py set-device|nccl|bad-backend|caught|recorded|no-gpu

set-device: torch.cuda.set_device(LOCAL_RANK); nccl: init_process_group("nccl");
bad-backend: init_process_group("gloo-typo"); caught: init_process_group("nccl") in a
try whose except prints the traceback (traceback.print_exc()) and exits 3; recorded:
init_process_group("nccl") in a main() under torch's @record, which writes the error file;
no-gpu: what torch's CUDA build raises from set_device on a machine without a GPU (this CPU
build cannot), ``RuntimeError: No CUDA GPUs are available``.
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
elif case == "bad-backend":
    dist.init_process_group("gloo-typo")
elif case == "caught":
    import traceback

    try:
        dist.init_process_group("nccl")
    except RuntimeError:
        traceback.print_exc()
        sys.exit(3)
elif case == "recorded":
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def main() -> None:
        dist.init_process_group("nccl")

    main()
elif case == "no-gpu":
    raise RuntimeError("No CUDA GPUs are available")
