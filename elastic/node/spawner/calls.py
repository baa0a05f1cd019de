"""The Linux process calls the spawner and its prewarm pool share: ``prctl``, a quiet ``killpg``,
and the set-up of a forked child before its ``exec``.

Standard library only, like the spawner.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal

__all__ = [
    "PR_SET_CHILD_SUBREAPER", "PR_SET_PDEATHSIG", "WorkingDirectoryError", "become_child", "killpg", "prctl",
]

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


class WorkingDirectoryError(OSError):
    """The rank's working directory cannot be entered on this node (``filename`` names it)."""


def become_child(parent_pid: int, cwd: str | None, output_fd: int) -> None:
    """In a child just forked by ``parent_pid``, before its ``exec``: a session of its own,
    SIGKILLed when the parent dies (gone at once if it already has), signals as a fresh
    process has them, ``cwd``, stdin from ``/dev/null``, stdout and stderr to ``output_fd``."""
    os.setsid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)  # the parent died before prctl took effect
    signal.set_wakeup_fd(-1)
    # Python ignores these; a child gets the defaults, as subprocess gives them.
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, signal.SIG_DFL)
    if cwd is not None:
        try:
            os.chdir(cwd)
        except OSError as error:
            raise WorkingDirectoryError(error.errno or errno.ENOENT, error.strerror, cwd) from None
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
