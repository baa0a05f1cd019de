"""Note this rank's node, and on attempt 0 hit a GPU fault on one group rank's node.

Usage: gpu_fault_on_node.py OUT [GROUP_RANK [FAULT]]

Every rank writes its ``ELASTIC_NODE`` to OUT/attempt-A-rank-R.node. On attempt 0 the rank of
group rank GROUP_RANK (default 2) fails, the others wait to be stopped; later attempts exit 0.
FAULT ``ecc`` (the default): it prints CUDA's uncorrectable ECC error (ostris/ai-toolkit#470) and
exits 1. ``no-gpu``: it raises torch's ``RuntimeError: No CUDA GPUs are available`` (what
``torch.cuda.set_device`` raises once the node's GPU has fallen off the bus), uncaught.
"""

import os
import sys
import time

out = sys.argv[1]
faulty = sys.argv[2] if len(sys.argv) > 2 else "2"
fault = sys.argv[3] if len(sys.argv) > 3 else "ecc"
attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
with open(os.path.join(out, f"attempt-{attempt}-rank-{rank}.node"), "w") as note:
    note.write(os.environ["ELASTIC_NODE"])
if attempt != "0":
    sys.exit(0)
if os.environ["GROUP_RANK"] != faulty:
    time.sleep(120)
    sys.exit(0)
time.sleep(0.5)
if fault == "no-gpu":
    raise RuntimeError("No CUDA GPUs are available")
print("RuntimeError: CUDA error: uncorrectable ECC error encountered", file=sys.stderr)
print("Search for `cudaErrorECCUncorrectable' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
      "group__CUDART__TYPES.html for more information.", file=sys.stderr, flush=True)
sys.exit(1)
