"""Note this rank's node, and on attempt 0 hit an uncorrectable ECC error on one group rank's node.

Usage: gpu_fault_on_node.py OUT [GROUP_RANK]

Every rank writes its ``ELASTIC_NODE`` to OUT/attempt-A-rank-R.node. On attempt 0 the rank of
group rank GROUP_RANK (default 2) prints CUDA's uncorrectable ECC error (ostris/ai-toolkit#470) and exits 1, the
others wait to be stopped; later attempts exit 0.
"""

import os
import sys
import time

out = sys.argv[1]
faulty = sys.argv[2] if len(sys.argv) > 2 else "2"
attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
with open(os.path.join(out, f"attempt-{attempt}-rank-{rank}.node"), "w") as note:
    note.write(os.environ["ELASTIC_NODE"])
if attempt != "0":
    sys.exit(0)
if os.environ["GROUP_RANK"] != faulty:
    time.sleep(120)
    sys.exit(0)
time.sleep(0.5)
print("RuntimeError: CUDA error: uncorrectable ECC error encountered", file=sys.stderr)
print("Search for `cudaErrorECCUncorrectable' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
      "group__CUDART__TYPES.html for more information.", file=sys.stderr, flush=True)
sys.exit(1)
