"""Send SIGNAL (a name like SIGKILL) to this process; --attempt/--rank: only there, else exit 0.

Usage: kill_self.py SIGNAL [--attempt A] [--rank R]
"""

import argparse
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("signal")
parser.add_argument("--attempt", type=int)
parser.add_argument("--rank", type=int)
args = parser.parse_args()
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
rank = int(os.environ.get("RANK", "0"))
if args.attempt in (None, attempt) and args.rank in (None, rank):
    os.kill(os.getpid(), signal.Signals[args.signal])
    time.sleep(5)  # the signal lands before this ends
    sys.exit(1)  # the signal did not kill us: not what the test wanted
sys.exit(0)
