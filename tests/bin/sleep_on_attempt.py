"""On attempt A write PIDDIR/rank-R.pid and sleep (at most 300 s); on other attempts exit 0.

Usage: sleep_on_attempt.py PIDDIR A
"""

import os
import sys
import time

directory, attempt = sys.argv[1], int(sys.argv[2])
if int(os.environ["TORCHELASTIC_RESTART_COUNT"]) != attempt:
    sys.exit(0)
path = os.path.join(directory, f"rank-{os.environ['RANK']}.pid")
with open(path + ".tmp", "w") as out:
    out.write(f"{os.getpid()}\n")
os.replace(path + ".tmp", path)
time.sleep(300)
