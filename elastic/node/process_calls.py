"""The Linux process calls the spawner and its prewarm pool share: ``prctl``, a quiet ``killpg``.

Standard library only, like the spawner.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["PR_SET_CHILD_SUBREAPER", "PR_SET_PDEATHSIG", "killpg", "prctl"]

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, arg: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, arg, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def killpg(pgid: int, signum: int) -> None:
    """Signal a process group; one already gone (or not ours to signal) is no error."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass
