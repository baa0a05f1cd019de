"""Rank 1 takes host memory 64 MiB at a time, each page written, until the kernel stops it; rank 0
waits to be stopped. Usage: eat_memory.py
"""

import os
import time

if os.environ["RANK"] != "1":
    time.sleep(120)
    raise SystemExit(0)
held = []
while True:
    held.append(b"\x01" * (64 << 20))
    time.sleep(0.01)
