"""Print "step N" every 0.02 s and note each step's time in OUTDIR/steps-R; once OUTDIR/flood
exists, also print MB megabytes of filler, one megabyte a step, then write OUTDIR/flooded-R.
Writes its pid to OUTDIR/rank-R.pid first; ends on SIGTERM, or after 300 s.

Usage: steps_and_floods.py OUTDIR MB
"""

import os
import sys
import time
from pathlib import Path

out, megabytes = Path(sys.argv[1]), int(sys.argv[2])
rank = os.environ["RANK"]
(out / f"rank-{rank}.pid").write_text(str(os.getpid()))
filler = ("x" * 1023 + "\n") * 1024  # one megabyte of lines
flooded = 0
with (out / f"steps-{rank}").open("w") as steps:
    step = 0
    deadline_at = time.monotonic() + 300
    while time.monotonic() < deadline_at:
        step += 1
        print(f"step {step}", flush=True)
        steps.write(f"{step} {time.monotonic()} {flooded}\n")
        steps.flush()
        if flooded < megabytes and (out / "flood").exists():
            sys.stdout.write(filler)
            sys.stdout.flush()
            flooded += 1
            if flooded == megabytes:
                (out / f"flooded-{rank}").touch()
        time.sleep(0.02)
