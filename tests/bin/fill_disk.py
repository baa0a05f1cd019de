"""Write zeros to PATH until the file system is full (ENOSPC), then exit CODE (default 0).

Usage: fill_disk.py PATH [CODE]
"""

import errno
import os
import sys

path, code = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
chunk = b"\0" * 4096
try:
    while True:
        os.write(fd, chunk)
except OSError as error:
    if error.errno != errno.ENOSPC:
        raise
finally:
    os.close(fd)
sys.exit(code)
