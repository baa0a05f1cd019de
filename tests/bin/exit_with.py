"""Exit with CODE (with --attempt A: only on attempt A, else 0), after --wait-for PATH appears.

Usage: exit_with.py CODE [--attempt A] [--wait-for PATH] [--say WORD] [--sleep S]
"""

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("code", type=int)
parser.add_argument("--attempt", type=int)
parser.add_argument("--wait-for")
parser.add_argument("--say", help="print '<SAY> attempt <A>' first")
parser.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep before exiting")
args = parser.parse_args()
if args.wait_for:
    deadline_at = time.monotonic() + 30
    while not os.path.exists(args.wait_for) and time.monotonic() < deadline_at:
        time.sleep(0.01)
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if args.say:
    print(f"{args.say} attempt {attempt}", flush=True)
time.sleep(args.sleep)
sys.exit(args.code if args.attempt in (None, attempt) else 0)
