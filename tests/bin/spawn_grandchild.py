"""Start a child that sleeps, write "rank_pid child_pid" to PIDDIR/rank-R.pid, then sleep or exit.

Usage: spawn_grandchild.py PIDDIR [--exit CODE]   (without --exit: sleep at most 300 s)
"""

import argparse
import os
import subprocess
import time

parser = argparse.ArgumentParser()
parser.add_argument("piddir")
parser.add_argument("--exit", type=int)
args = parser.parse_args()
child = subprocess.Popen(["sleep", "300"])
path = os.path.join(args.piddir, f"rank-{os.environ['RANK']}.pid")
with open(path + ".tmp", "w") as out:
    out.write(f"{os.getpid()} {child.pid}\n")
os.replace(path + ".tmp", path)
if args.exit is not None:
    os._exit(args.exit)  # leaves the child running, as a crashing rank would
time.sleep(300)
