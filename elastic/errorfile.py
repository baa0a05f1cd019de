"""Torch-style error files (``TORCHELASTIC_ERROR_FILE``): reading what a rank recorded."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["read_error_message"]


def read_error_message(path: str | Path) -> str | None:
    """The exception text a rank wrote with torch's ``@record``, or ``None``.

    torch writes ``{"message": {"message": "...", "extraInfo": {...}}}``; older
    writers put a plain string under ``message``. Anything unreadable is ``None``:
    the error file is a courtesy of the rank, never a reason to fail the launcher.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    return message if isinstance(message, str) and message else None
