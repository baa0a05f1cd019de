"""The process group's store, hosted apart from every rank: ``python -m elastic.worker.inplace.store_host``.

In-place restarts need a store that outlives any rank, rank 0 included: each
generation of the process group meets on it under its own prefix. elastic's
launcher does not import torch, so it starts this program with the ranks' own
Python: ``PYTHON -m elastic.worker.inplace.store_host HOST PORT READY_FILE [PARENT_PID]``. It
hosts a ``torch.distributed.TCPStore`` (the master, ranks connect as clients) on
``HOST:PORT`` (``PORT`` 0: any free port), writes ``host:port`` to ``READY_FILE``
whole once it listens, and serves until SIGTERM or SIGINT, or until its parent
is no longer ``PARENT_PID`` (default: its parent when it started; it looks every
half second), so a launcher that dies, even before this program got going,
leaves no store behind. Exit status 0 when told to stop, 1 when its parent went,
2 for a usage error. torch is imported inside :func:`main`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from datetime import timedelta

__all__ = ["PARENT_LOOK_S", "main"]

PARENT_LOOK_S = 0.5
_USAGE = "usage: python -m elastic.worker.inplace.store_host HOST PORT READY_FILE [PARENT_PID]"


def main(argv: list[str]) -> int:
    """Host the store until told to stop or orphaned; the exit status."""
    if len(argv) not in (3, 4) or not all(number.isdigit() for number in [argv[1], *argv[3:]]):
        print(_USAGE, file=sys.stderr)
        return 2
    host, port, ready_file = argv[0], int(argv[1]), argv[2]
    parent = int(argv[3]) if len(argv) == 4 else os.getppid()
    if os.getppid() != parent:
        return 1
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    import torch.distributed as dist

    store = dist.TCPStore(  # type: ignore[attr-defined]  # re-exported by torch.distributed, not declared so
        host, port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30)
    )
    temporary = f"{ready_file}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(f"{host}:{store.port}\n")
    os.replace(temporary, ready_file)
    while not stop.wait(PARENT_LOOK_S):
        if os.getppid() != parent:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
