"""Exit with CODE when SIGTERM arrives; create READY once the handler is in place, then wait.

Usage: trap_sigterm.py CODE READY
"""

import os
import signal
import sys
import time

code = int(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: os._exit(code))
open(sys.argv[2], "w").close()
time.sleep(300)
