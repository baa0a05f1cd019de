"""Call elastic.heartbeat(step=1) once and print nothing; then exit CODE (after --sleep S).

Usage: beats_silently.py CODE [--sleep S]
"""

import argparse
import sys
import time

import elastic

parser = argparse.ArgumentParser()
parser.add_argument("code", type=int)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()
elastic.heartbeat(step=1)
time.sleep(args.sleep)
sys.exit(args.code)
