"""Write PIDFILE, then sleep (at most 300 s) inside ``stuck_in_allreduce()``.

Usage: stuck_in_function.py PIDFILE
"""

import os
import sys
import time


def stuck_in_allreduce() -> None:
    time.sleep(300)


with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(f"{os.getpid()}\n")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
stuck_in_allreduce()
