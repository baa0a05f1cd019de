"""Write this pid to PIDDIR/rank-R.pid, then sleep (at most 300 s); signals keep their defaults.

Usage: sleep_forever.py PIDDIR
"""

import os
import sys
import time

directory = sys.argv[1]
path = os.path.join(directory, f"rank-{os.environ['RANK']}.pid")
with open(path + ".tmp", "w") as out:
    out.write(f"{os.getpid()}\n")
os.replace(path + ".tmp", path)
time.sleep(300)
