"""A torch rank that says whether torch was imported before the script ran (a warm interpreter
imports it first), then ``init_process_group("gloo")`` and two steps. On attempt 0 rank 1 waits
for DIR/go (the test writes it once the ranks' warm successors run) and exits 3; rank 0 waits.

With ``--import MODULE`` it says whether MODULE was imported before the script, imports it first
and prints its ``RANK`` if it has one (what it read at import).

Usage: learned_prewarm.py DIR [--import MODULE]
"""

import importlib
import os
import sys
import time

print(f"torch imported before the script: {'torch' in sys.modules}", flush=True)
if sys.argv[2:3] == ["--import"]:
    name = sys.argv[3]
    print(f"{name} imported before the script: {name in sys.modules}", flush=True)
    module = importlib.import_module(name)
    if hasattr(module, "RANK"):
        print(f"{name} read RANK={module.RANK} at import", flush=True)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
for number in (1, 2):
    dist.all_reduce(torch.ones(4))
    print(f"step {number}", flush=True)
if attempt == "0":
    go = os.path.join(sys.argv[1], "go")
    deadline = time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)
    if dist.get_rank() == 1:
        sys.exit(3)
    time.sleep(120)  # rank 1's failure ends this rank
dist.destroy_process_group()
