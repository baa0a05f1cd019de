"""Catch SIGTERM and carry on (a handler that does not exit); create READY, then sleep (at most 300 s).

Usage: catch_sigterm.py READY
"""

import signal
import sys
import time

signal.signal(signal.SIGTERM, lambda *_: print("caught SIGTERM, carrying on", flush=True))
open(sys.argv[1], "w").close()
deadline_at = time.monotonic() + 300
while time.monotonic() < deadline_at:
    time.sleep(1)
