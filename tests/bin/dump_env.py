"""Write the environment as JSON to DIR/attempt-A-rank-R.json; then exit 0, or CODE with --exit.

Usage: dump_env.py DIR [--exit CODE [--attempt A] [--after-ranks N]] [EXTRA...]
(--attempt: exit CODE only on attempt A; --after-ranks: first wait, up to 60 s, until N ranks
of the attempt have written theirs, so a fast failure cannot drain them before they do).
Extra arguments are recorded, space-joined, under the key ARGV_EXTRA.
"""

import argparse
import glob
import json
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("directory")
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--attempt", type=int)
parser.add_argument("--after-ranks", type=int, default=0)
args, extra = parser.parse_known_args()
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
path = os.path.join(args.directory, f"attempt-{attempt}-rank-{os.environ['RANK']}.json")
with open(path + ".tmp", "w") as out:
    json.dump({**os.environ, "ARGV_EXTRA": " ".join(extra)}, out)
os.replace(path + ".tmp", path)
code = args.exit if args.attempt in (None, int(attempt)) else 0
deadline = time.monotonic() + 60
pattern = os.path.join(args.directory, f"attempt-{attempt}-rank-*.json")
while code and len(glob.glob(pattern)) < args.after_ranks and time.monotonic() < deadline:
    time.sleep(0.02)
sys.exit(code)
