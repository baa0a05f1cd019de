#!/usr/bin/env python3
"""Stands in for a py-spy that cannot take native frames; without --native it is the real one.

FAKE_PY_SPY_NATIVE=fail: --native fails the way py-spy does where it cannot unwind;
FAKE_PY_SPY_NATIVE=hang: --native never answers (sleeps 60 s).
REAL_PY_SPY: the real py-spy, run for every call without --native.
"""

import os
import sys
import time

if "--native" in sys.argv:
    if os.environ.get("FAKE_PY_SPY_NATIVE") == "hang":
        time.sleep(60)
    print("Error: Collecting stack traces from native extensions (`--native`) is not supported on your platform.",
          file=sys.stderr)
    sys.exit(1)
os.execv(os.environ["REAL_PY_SPY"], [os.environ["REAL_PY_SPY"], *sys.argv[1:]])
