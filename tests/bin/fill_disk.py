"""Write zeros to PATH until the file system is full (ENOSPC), then exit CODE (default 0).

Usage: fill_disk.py PATH [CODE] [--wait-for FILE]   (first wait, up to 30 s, for FILE to exist)
"""

import argparse
import errno
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("path")
parser.add_argument("code", type=int, nargs="?", default=0)
parser.add_argument("--wait-for")
args = parser.parse_args()
deadline_at = time.monotonic() + 30
while args.wait_for and not os.path.exists(args.wait_for) and time.monotonic() < deadline_at:
    time.sleep(0.01)
fd = os.open(args.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
chunk = b"\0" * 4096
try:
    while True:
        os.write(fd, chunk)
except OSError as error:
    if error.errno != errno.ENOSPC:
        raise
finally:
    os.close(fd)
sys.exit(args.code)
