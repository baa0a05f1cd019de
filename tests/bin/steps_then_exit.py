"""Print "step N" every 0.05 s for STEPS steps, then exit 0, in every attempt. Writes its pid to
OUTDIR/attempt-A-rank-R.pid before its first step; on SIGTERM writes OUTDIR/stopped-A-R and exits 0.

Usage: steps_then_exit.py OUTDIR STEPS
"""

import os
import signal
import sys
import time
from pathlib import Path

out, steps = Path(sys.argv[1]), int(sys.argv[2])
rank, attempt = os.environ["RANK"], os.environ.get("ELASTIC_ATTEMPT", "0")


def stopped(*_: object) -> None:
    (out / f"stopped-{attempt}-{rank}").write_text(str(time.time()))
    os._exit(0)


signal.signal(signal.SIGTERM, stopped)
(out / f"attempt-{attempt}-rank-{rank}.pid").write_text(str(os.getpid()))
for step in range(1, steps + 1):
    print(f"step {step}", flush=True)
    time.sleep(0.05)
