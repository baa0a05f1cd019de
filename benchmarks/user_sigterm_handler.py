"""Run a training script with a SIGTERM handler of the user's own, as ``bench_framework_restart.py``'s
``dcp-ddp-handler`` recipe does: the handler raises SystemExit, so the script's ``finally`` blocks and
``atexit`` handlers run before it exits (what a script that stops cleanly on SIGTERM does). Installed
with ``signal.signal``, so the rank bootstrap writes it down as the rank's own.

Usage: python user_sigterm_handler.py SCRIPT [ARGS...]
"""

import os
import runpy
import signal
import sys
from types import FrameType


def stop(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, stop)
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python SCRIPT` would have it
runpy.run_path(sys.argv[0], run_name="__main__")
