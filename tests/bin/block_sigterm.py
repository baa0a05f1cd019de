"""Block SIGTERM (no handler: the default action once unblocked), create READY, then sleep (at most 300 s).

Usage: block_sigterm.py READY
"""

import signal
import sys
import time

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
open(sys.argv[1], "w").close()
time.sleep(300)
