"""Write [sys.executable, *sys.argv] as JSON to the file named by the first argument.

Usage: record_argv.py OUTFILE [ARGS...]
"""

import json
import sys

with open(sys.argv[1], "w") as out:
    json.dump([sys.executable, *sys.argv], out)
