"""Ignore SIGTERM and SIGINT, write this pid to PIDDIR/rank-R.pid, then sleep (at most 300 s).

With ATTEMPT: only on attempt ATTEMPT; on the others print a line and exit 0.

Usage: ignore_sigterm.py PIDDIR [ATTEMPT]
"""

import os
import signal
import sys
import time

if len(sys.argv) > 2 and int(os.environ["TORCHELASTIC_RESTART_COUNT"]) != int(sys.argv[2]):
    print(f"rank {os.environ['RANK']} up", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
directory = sys.argv[1]
path = os.path.join(directory, f"rank-{os.environ['RANK']}.pid")
with open(path + ".tmp", "w") as out:
    out.write(f"{os.getpid()}\n")
os.replace(path + ".tmp", path)
time.sleep(300)
