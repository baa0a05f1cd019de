"""On attempt 0, delete the directory the rank started in, then exit 3; later attempts print it.

Usage: remove_cwd.py
"""

import os
import shutil
import sys

if os.environ.get("ELASTIC_ATTEMPT") == "0":
    shutil.rmtree(os.getcwd())
    sys.exit(3)
print("started in", os.getcwd())
