"""Torch-style error files (``TORCHELASTIC_ERROR_FILE``): what a rank's exception was.

Standard library only: training scripts import :func:`record` from here.
"""

from __future__ import annotations

import functools
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

__all__ = ["read_error", "read_error_message", "record", "write_error_file"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
ERROR_FILE_VAR = "TORCHELASTIC_ERROR_FILE"
_FILE_MODE = 0o600  # like every file of the run directory


def write_error_file(error: BaseException, path: str | Path | None = None) -> None:
    """Write ``error`` in the format torch's ``@record`` uses (nothing without a path)."""
    target = path or os.environ.get(ERROR_FILE_VAR)
    if not target:
        return
    data = {
        "message": {
            "message": f"{type(error).__name__}: {error}",
            "extraInfo": {
                "py_callstack": "".join(traceback.format_exception(error)),
                "timestamp": str(int(time.time())),
            },
        }
    }
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, _FILE_MODE)
    os.fchmod(fd, _FILE_MODE)  # also when the file was there already
    with open(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(data))


def record(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Like torch's ``@record`` for scripts without torch: an escaping exception is
    written to ``TORCHELASTIC_ERROR_FILE`` (the launcher's report shows it), then re-raised."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            write_error_file(error)
            raise

    return wrapper


def read_error(path: str | Path) -> tuple[str | None, str | None]:
    """``(message, traceback)`` a rank wrote with torch's ``@record``; ``None`` for what is missing.

    torch writes ``{"message": {"message": "...", "extraInfo": {"py_callstack": "...",
    "timestamp": "..."}}}``; older writers put a plain string under ``message`` (no
    traceback then). Anything unreadable is ``None``: the error file is a courtesy of
    the rank, never a reason to fail the launcher.

    The file is made private (0600) on the way: torch's ``@record`` writes it
    with the umask's mode (0644), and it sits in the run directory.
    """
    try:
        os.chmod(path, _FILE_MODE)
        data = json.loads(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None, None
    message = data.get("message") if isinstance(data, dict) else None
    callstack = None
    if isinstance(message, dict):
        extra = message.get("extraInfo")
        callstack = extra.get("py_callstack") if isinstance(extra, dict) else None
        message = message.get("message")
    return (
        message if isinstance(message, str) and message else None,
        callstack.rstrip("\n") if isinstance(callstack, str) and callstack.strip() else None,
    )


def read_error_message(path: str | Path) -> str | None:
    """The exception text a rank wrote with torch's ``@record``, or ``None`` (see :func:`read_error`)."""
    return read_error(path)[0]
