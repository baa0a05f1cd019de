"""Record the resume point, save a whole checkpoint, then die mid-way through the next one.

Usage: torn_save.py CKPTDIR OUTDIR [--always]
Every attempt writes OUTDIR/attempt-A.json with ELASTIC_RESUME_FROM and ELASTIC_RESUME_STEP.
Attempt 0 (every attempt with --always): torch.save ckpt_{10+A}.pt whole (by rename, attempt 0
only), then write the first half of a torch.save of ckpt_{20+A}.pt straight into place, as
torch.save does, and SIGKILL itself. Other attempts exit 0.
"""

import io
import json
import os
import signal
import sys

import torch

checkpoints, out = sys.argv[1], sys.argv[2]
always = "--always" in sys.argv[3:]
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
with open(os.path.join(out, f"attempt-{attempt}.json"), "w") as record:
    json.dump({k: os.environ.get(k) for k in ("ELASTIC_RESUME_FROM", "ELASTIC_RESUME_STEP")}, record)
if attempt != 0 and not always:
    sys.exit(0)
if attempt == 0:
    whole = os.path.join(checkpoints, "ckpt_10.pt")
    torch.save({"step": 10, "w": torch.ones(4096)}, whole + ".tmp")
    os.replace(whole + ".tmp", whole)
buffer = io.BytesIO()
torch.save({"step": 20 + attempt, "w": torch.ones(4096)}, buffer)
with open(os.path.join(checkpoints, f"ckpt_{20 + attempt}.pt"), "wb") as torn:
    torn.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    torn.flush()
    os.fsync(torn.fileno())
os.kill(os.getpid(), signal.SIGKILL)
