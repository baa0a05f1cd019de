"""On SIGTERM, exit the way a training script does: its handler raises SystemExit, then a
``finally`` block and an ``atexit`` handler each work for SECONDS/2 (``wandb.finish()``, a log
flush), the last writing OUTDIR/finished-R (R: the rank). Creates READY once the handler is in
place, then waits (at most 300 s). With ``ignore``, the handler first sets SIGTERM to SIG_IGN, so
that a second one cannot cut its exit short (a common pattern).

Usage: exit_gracefully.py OUTDIR SECONDS READY [ignore]
"""

import atexit
import os
import signal
import sys
import time
from pathlib import Path

out, seconds, ready = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
ignore_again = sys.argv[4:] == ["ignore"]
rank = os.environ["RANK"]
done: list[str] = []


def stop(signum: int, _frame: object) -> None:
    if ignore_again:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def finish() -> None:
    time.sleep(seconds / 2)
    done.append("atexit")
    (out / f"finished-{rank}").write_text(" ".join(done))


signal.signal(signal.SIGTERM, stop)
atexit.register(finish)
open(ready, "w").close()
try:
    time.sleep(300)
finally:
    time.sleep(seconds / 2)
    done.append("finally")
