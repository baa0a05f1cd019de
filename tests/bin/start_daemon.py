"""Start a daemon in a session of its own, write "rank_pid daemon_pid" to PIDDIR/rank-R.pid, then exit or sleep.

Usage: start_daemon.py PIDDIR [--double-fork] [--exit CODE]   (without --exit: sleep at most 300 s)

The daemon sleeps 300 s. With --double-fork it is the orphaned grandchild of a
session leader that exits at once (the classic daemon), else the rank's own
child that called setsid.
"""

import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("piddir")
parser.add_argument("--double-fork", action="store_true")
parser.add_argument("--exit", type=int)
args = parser.parse_args()
read_end, write_end = os.pipe()
if os.fork() == 0:
    os.close(read_end)
    os.setsid()
    if args.double_fork and os.fork() != 0:
        os._exit(0)
    os.write(write_end, str(os.getpid()).encode())
    os.close(write_end)
    time.sleep(300)
    os._exit(0)
os.close(write_end)
daemon = int(os.read(read_end, 64))
path = os.path.join(args.piddir, f"rank-{os.environ.get('RANK', '0')}.pid")
with open(path + ".tmp", "w") as out:
    out.write(f"{os.getpid()} {daemon}\n")
os.replace(path + ".tmp", path)
if args.exit is not None:
    os._exit(args.exit)
time.sleep(300)
