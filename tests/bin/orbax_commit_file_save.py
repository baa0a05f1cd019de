"""Orbax in commit-file mode: commit step 1, then start saving a large step 2 and wait to be killed.

Usage: orbax_commit_file_save.py DIRECTORY (absolute). Prints ``saving`` when step 2 starts.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import options

directory = sys.argv[1]
commit_file = options.AtomicityOptions(mode=options.AtomicityMode.COMMIT_FILE)
manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(atomicity_options=commit_file))
manager.save(1, args=ocp.args.StandardSave({"w": np.zeros(4, np.float32)}))
manager.wait_until_finished()
large = np.random.default_rng(0).standard_normal(64_000_000, dtype=np.float32)  # 256 MB: writing takes a while
print("saving", flush=True)
manager.save(2, args=ocp.args.StandardSave({"w": large}))
manager.wait_until_finished()
print("saved", flush=True)
time.sleep(120)
