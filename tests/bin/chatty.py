"""Write MEGABYTES MiB to stdout in 1 KiB lines, then exit 0 (--no-newlines: end them with CR).

--no-newlines writes what a progress bar writes: carriage returns and never a newline.

Usage: chatty.py MEGABYTES [--no-newlines]
"""

import sys

end = b"\r" if "--no-newlines" in sys.argv[2:] else b"\n"
line = b"x" * 1023 + end
out = sys.stdout.buffer
for _ in range(int(sys.argv[1]) * 1024):
    out.write(line)
out.flush()
