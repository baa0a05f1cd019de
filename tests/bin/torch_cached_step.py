"""A torch.compile rank on a "replacement node": a fresh TMPDIR each attempt, so /tmp's caches are cold.

Usage: torch_cached_step.py TMPBASE: TMPDIR becomes TMPBASE/attempt-A-rank-R (new) before torch is
imported; the rank compiles a small function, prints inductor's own cache counters as
``cache: fxgraph_hits=H fxgraph_misses=M dir=D``, then ``step 1``, and exits 3 on attempt 0.
"""

import os
import sys
import tempfile

attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
fresh = os.path.join(sys.argv[1], f"attempt-{attempt}-rank-{rank}")
os.makedirs(fresh)
os.environ["TMPDIR"] = fresh
tempfile.tempdir = None  # read TMPDIR again

import torch  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402
from torch._inductor.runtime.cache_dir_utils import cache_dir  # noqa: E402



@torch.compile
def step(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w).sum(dim=0)


step(torch.ones(8, 8), torch.ones(4, 8))
inductor = counters["inductor"]
print(f"cache: fxgraph_hits={inductor['fxgraph_cache_hit']} fxgraph_misses={inductor['fxgraph_cache_miss']} "
      f"dir={cache_dir()}", flush=True)
print("step 1", flush=True)
sys.exit(3 if attempt == "0" else 0)
