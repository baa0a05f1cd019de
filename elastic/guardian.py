"""A watchdog process that SIGKILLs worker process groups if their supervisor dies.

``PR_SET_PDEATHSIG`` kills a worker when its supervisor dies, but not the
worker's own children (data loaders, shells, compilers). The guardian closes
that gap: the supervisor keeps a pipe to it and tells it every process group it
starts; when the pipe reaches end-of-file (the supervisor exited, SIGKILL
included) the guardian SIGKILLs every group still registered, then exits.

Run as ``python -m elastic.guardian``; it reads ``+PGID`` and ``-PGID`` lines.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import IO

__all__ = ["GuardianClient", "main"]


def main(stream: IO[str] | None = None) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    groups: set[int] = set()
    for line in stream if stream is not None else sys.stdin:
        line = line.strip()
        if line.startswith("+"):
            groups.add(int(line[1:]))
        elif line.startswith("-"):
            groups.discard(int(line[1:]))
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return 0


class GuardianClient:
    """The supervisor's end of the pipe; every method is best-effort and cheap."""

    def __init__(self, process: subprocess.Popen[str] | None) -> None:
        self._process = process

    @classmethod
    def start(cls) -> GuardianClient:
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "elastic.guardian"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                text=True,
            )
        except OSError:
            return cls(None)  # workers still die with us through PR_SET_PDEATHSIG
        return cls(process)

    def watch(self, pgid: int) -> None:
        self._send(f"+{pgid}\n")

    def forget(self, pgid: int) -> None:
        self._send(f"-{pgid}\n")

    def _send(self, line: str) -> None:
        if self._process is None or self._process.stdin is None:
            return
        try:
            self._process.stdin.write(line)
            self._process.stdin.flush()
        except (BrokenPipeError, ValueError):
            self._process = None

    def close(self, timeout_s: float = 5.0) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()
        except BrokenPipeError:
            pass
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    sys.exit(main())
