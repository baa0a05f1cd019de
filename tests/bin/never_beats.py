"""Sleep SECONDS without a heartbeat or a line of output, then exit 0.

Usage: never_beats.py SECONDS
"""

import sys
import time

time.sleep(float(sys.argv[1]))
