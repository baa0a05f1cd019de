"""Print COUNT numbered lines, then create MARKER, then sleep (at most 300 s).

Usage: print_lines.py COUNT MARKER
"""

import sys
import time
from pathlib import Path

out = sys.stdout
for i in range(int(sys.argv[1])):
    out.write(f"line {i}\n")
out.flush()
Path(sys.argv[2]).touch()
time.sleep(300)
