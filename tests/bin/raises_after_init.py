"""Join a gloo process group, then fail in rank 1 with a plain exception; rank 0 leaves cleanly.

torch's excepthook, installed by init_process_group, prints rank 1's traceback with its own
``[rank1]:`` before each line, as any DDP script's is printed.
"""

import os

import torch.distributed as dist

dist.init_process_group("gloo")
if int(os.environ["RANK"]) == 1:
    raise ValueError("bad batch at step 3")
dist.destroy_process_group()
