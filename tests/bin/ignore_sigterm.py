"""Ignore SIGTERM and SIGINT, write this pid to PIDDIR/rank-R.pid, then sleep (at most 300 s).

Usage: ignore_sigterm.py PIDDIR
"""

import os
import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
directory = sys.argv[1]
path = os.path.join(directory, f"rank-{os.environ['RANK']}.pid")
with open(path + ".tmp", "w") as out:
    out.write(f"{os.getpid()}\n")
os.replace(path + ".tmp", path)
time.sleep(300)
