"""Rank-0-only work after training (an upload, a save): every other rank exits 0 at once.

Rank 0 says it starts, then shows a sign of life every INTERVAL seconds, COUNT times:
a progress line on stdout (output), elastic.heartbeat() (heartbeat), or a write into
$ELASTIC_CHECKPOINT_DIR (checkpoint). Then it exits 0, or with --then-hang it stays
alive and silent (at most 300 s).

Usage: works_after_peer.py COUNT INTERVAL [--sign output|heartbeat|checkpoint] [--then-hang]
"""

import argparse
import os
import sys
import time

import elastic

parser = argparse.ArgumentParser()
parser.add_argument("count", type=int)
parser.add_argument("interval", type=float)
parser.add_argument("--sign", choices=("output", "heartbeat", "checkpoint"), default="output")
parser.add_argument("--then-hang", action="store_true")
args = parser.parse_args()
if os.environ["RANK"] != "0":
    sys.exit(0)
print("training done; uploading the checkpoint", flush=True)
for i in range(args.count):
    time.sleep(args.interval)
    if args.sign == "output":
        print(f"uploading {100 * (i + 1) // args.count}%", flush=True)
    elif args.sign == "heartbeat":
        elastic.heartbeat(step=i)
    else:
        with open(os.path.join(os.environ["ELASTIC_CHECKPOINT_DIR"], "upload.part"), "a") as part:
            part.write(f"{i}\n")
if args.then_hang:
    time.sleep(300)
print("upload complete", flush=True)
