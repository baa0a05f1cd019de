"""On attempt 0, print "step N" every 0.05 s until SIGTERM, then write OUTDIR/stopped-R (the step
reached and the wall time) and exit 0; on later attempts, exit 0 at once. Writes its pid to
OUTDIR/rank-R.pid once its handler is in place; gives up after 300 s.

Usage: steps_until_stopped.py OUTDIR
"""

import os
import signal
import sys
import time
from pathlib import Path

out = Path(sys.argv[1])
rank = os.environ["RANK"]
if os.environ.get("ELASTIC_ATTEMPT", "0") != "0":
    sys.exit(0)
step = 0


def stopped(*_: object) -> None:
    (out / f"stopped-{rank}").write_text(f"{step} {time.time()}")
    os._exit(0)


signal.signal(signal.SIGTERM, stopped)
(out / f"rank-{rank}.pid").write_text(str(os.getpid()))
deadline_at = time.monotonic() + 300
while time.monotonic() < deadline_at:
    step += 1
    print(f"step {step}", flush=True)
    time.sleep(0.05)
