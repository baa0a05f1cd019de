"""Attempt 0: rank 0 listens on MASTER_PORT, the others connect; a broken link exits 1 at once
(as a NCCL rank would); each rank writes PIDDIR/rank-R.pid once linked. Later attempts exit 0.

Usage: peer_link.py PIDDIR
"""

import os
import socket
import sys
import time

directory = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if os.environ["TORCHELASTIC_RESTART_COUNT"] != "0":
    sys.exit(0)
address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
if rank == 0:
    server = socket.create_server(address)
    links = [server.accept()[0] for _ in range(world - 1)]
else:
    deadline_at = time.monotonic() + 30
    while True:
        try:
            links = [socket.create_connection(address, timeout=5)]
            break
        except OSError:
            if time.monotonic() > deadline_at:
                sys.exit(2)
            time.sleep(0.05)
path = os.path.join(directory, f"rank-{rank}.pid")
with open(path + ".tmp", "w") as out:
    out.write(f"{os.getpid()}\n")
os.replace(path + ".tmp", path)
for link in links:
    link.settimeout(None)
while True:  # any end of a link (peer gone) ends this rank with 1
    if not links[0].recv(1):
        sys.exit(1)
