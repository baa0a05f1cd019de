"""Print COUNT numbered lines (padded to WIDTH characters), then create MARKER, then sleep
(at most 300 s).

Usage: print_lines.py COUNT MARKER [WIDTH]
"""

import sys
import time
from pathlib import Path

out = sys.stdout
width = int(sys.argv[3]) if len(sys.argv) > 3 else 0
for i in range(int(sys.argv[1])):
    out.write(f"line {i}".ljust(width) + "\n")
out.flush()
Path(sys.argv[2]).touch()
time.sleep(300)
