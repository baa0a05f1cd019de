"""The console's status line: drawn again soon after its text changes, and not rewritten when it did not."""

from __future__ import annotations

import os
import select
import time

from elastic.run.console.writer import Console

_BOUND_S = 10.0


def _read_for(fd: int, seconds: float) -> bytes:
    """What arrives on ``fd`` within ``seconds``."""
    data, deadline_at = b"", time.monotonic() + seconds
    while (left := deadline_at - time.monotonic()) > 0:
        if select.select([fd], [], [], left)[0]:
            data += os.read(fd, 65536)
    return data


def test_the_status_line_is_drawn_when_its_text_changes_and_only_then() -> None:
    """Looked at every 0.02 s: an unchanged line writes nothing; a changed one (the step a node
    just reported) is drawn within a look, with no line written above it."""
    reader, writer = os.pipe()
    console = Console(writer)
    text = ["step 3"]
    try:
        console.show_status(lambda: text[0], 0.02)
        assert b"step 3" in _read_for(reader, 0.3)
        assert b"" == _read_for(reader, 0.3)
        text[0] = "step 9"
        deadline_at = time.monotonic() + _BOUND_S
        drawn = b""
        while b"step 9" not in drawn and time.monotonic() < deadline_at:
            drawn += _read_for(reader, 0.05)
        assert b"step 9" in drawn
        console.write("a rank's line")
        assert b"a rank's line\nstep 9" in _read_for(reader, 0.3)
    finally:
        console.close()
        os.close(reader)
        os.close(writer)
