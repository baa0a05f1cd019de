"""Save for SECONDS when SIGTERM arrives, then write OUTDIR/saved-R and exit 0 (R: the rank).

Writes its pid to OUTDIR/ready-R once its handler is in place, then waits (at most 300 s).

Usage: save_on_sigterm.py OUTDIR SECONDS
"""

import os
import signal
import sys
import time
from pathlib import Path

out, seconds = Path(sys.argv[1]), float(sys.argv[2])
rank = os.environ["RANK"]


def save(*_: object) -> None:
    time.sleep(seconds)
    (out / f"saved-{rank}").touch()
    os._exit(0)


signal.signal(signal.SIGTERM, save)
(out / f"ready-{rank}").write_text(str(os.getpid()))
time.sleep(300)
