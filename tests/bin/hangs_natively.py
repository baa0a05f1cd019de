"""Print steps for a moment, then hang in a native wait (attempt 0, rank HANG_RANK only).

lock:   the main thread blocks on a lock it already holds, inside wait_for_the_peer()
        (a native wait: the interpreter's lock, the C library's futex);
atexit: the rank finishes and exits 0, but an at-exit handler, flush_metrics(), blocks
        the same way, so the main thread hangs in interpreter finalization;
atexit-native: the same with an at-exit handler that is a C function (libc's pause()):
        the main thread has no Python frame left, as in a destructor run at shutdown.

Every other rank, and every rank of a later attempt, exits 0 after the steps.

Usage: hangs_natively.py lock|atexit|atexit-native HANG_RANK
"""

import atexit
import ctypes
import os
import sys
import threading
import time

mode, hang_rank = sys.argv[1], int(sys.argv[2])
hangs = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and int(os.environ["RANK"]) == hang_rank
lock = threading.Lock()


def wait_for_the_peer() -> None:
    lock.acquire()
    lock.acquire()  # never returns


def flush_metrics() -> None:
    lock.acquire()
    lock.acquire()  # never returns


for step in range(1, 11):
    print(f"step {step}", flush=True)
    time.sleep(0.05)
if hangs and mode == "lock":
    wait_for_the_peer()
if hangs and mode == "atexit":
    atexit.register(flush_metrics)
if hangs and mode == "atexit-native":
    atexit.register(ctypes.CDLL(None).pause)
