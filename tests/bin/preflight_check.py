"""A ``--preflight`` command: records its environment, says what it checks, passes or fails.

Usage: preflight_check.py DIR [--fail-on NODE|all] [--code N] [--sleep S]

Writes its environment as JSON to DIR/preflight-<ELASTIC_NODE>-<pid>.json, prints
``checking <ELASTIC_NODE>``, then, on the node ``--fail-on`` names (or on every node with
``all``), sleeps ``--sleep`` seconds (a check that hangs), prints nvidia-smi's wording for a
GPU with uncorrectable ECC errors on stderr and exits ``--code`` (default 3). Elsewhere it exits 0.
"""

import argparse
import json
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("directory")
parser.add_argument("--fail-on")
parser.add_argument("--code", type=int, default=3)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()
node = os.environ["ELASTIC_NODE"]
path = os.path.join(args.directory, f"preflight-{node}-{os.getpid()}.json")
with open(path + ".tmp", "w") as out:
    json.dump(dict(os.environ), out)
os.replace(path + ".tmp", path)
print(f"checking {node}", flush=True)
if args.fail_on not in ("all", node):
    sys.exit(0)
time.sleep(args.sleep)
print("GPU 00000000:3B:00.0: Volatile Uncorrectable ECC errors: 2", file=sys.stderr, flush=True)
sys.exit(args.code)
