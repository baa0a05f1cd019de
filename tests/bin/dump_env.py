"""Write the environment as JSON to DIR/attempt-A-rank-R.json; then exit 0, or CODE with --exit.

Usage: dump_env.py DIR [--exit CODE [--attempt A]] [EXTRA...]   (--attempt: exit CODE only on
attempt A). Extra arguments are recorded, space-joined, under the key ARGV_EXTRA.
"""

import argparse
import json
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("directory")
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--attempt", type=int)
args, extra = parser.parse_known_args()
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
path = os.path.join(args.directory, f"attempt-{attempt}-rank-{os.environ['RANK']}.json")
with open(path + ".tmp", "w") as out:
    json.dump({**os.environ, "ARGV_EXTRA": " ".join(extra)}, out)
os.replace(path + ".tmp", path)
sys.exit(args.exit if args.attempt in (None, int(attempt)) else 0)
