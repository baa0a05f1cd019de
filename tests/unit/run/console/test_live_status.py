"""The terminal's status line: the live step and the newest checkpoint apart; the poll that finds it."""

from __future__ import annotations

import time
from pathlib import Path

from elastic.core.checkpoints.selection import Checkpoint
from elastic.run.console.live_status import LiveStatus
from elastic.views.status import status_line


def line(step: int | None, checkpoint_step: int | None | bool) -> str:
    return status_line(phase="running", attempt=1, world_size=2, elapsed_s=75, step=step,
                       checkpoint_step=checkpoint_step, restarts_left=2)  # type: ignore[arg-type]


def test_the_line_shows_the_step_and_the_checkpoint_apart() -> None:
    assert "elastic | running | attempt 1 | world 2 | 00:01:15 | step 21 · ckpt 20 | restarts left 2" == line(21, 20)
    assert "| step - · ckpt - |" in line(None, None)
    assert "| step 3 |" in line(3, False)  # no --checkpoint-dir: no checkpoint to show


def test_the_poll_hands_the_newest_complete_checkpoint_to_the_line(tmp_path: Path) -> None:
    """A thread of its own scans the directory; what it found goes to the driver's status text."""
    (tmp_path / "step_7.pt").write_text("7")
    (tmp_path / "step_9.pt.tmp").write_text("9")  # not complete: never shown
    seen: list[Checkpoint | None] = []
    status = LiveStatus(lambda c: seen.append(c) or f"ckpt {c.step if c else '-'}", tmp_path, None, poll_s=0.05)
    status.start()
    try:
        deadline_at = time.monotonic() + 10
        while status.text() != "ckpt 7" and time.monotonic() < deadline_at:
            time.sleep(0.01)
        assert "ckpt 7" == status.text()
    finally:
        status.stop()


def test_without_a_checkpoint_directory_nothing_is_polled() -> None:
    status = LiveStatus(lambda c: "no checkpoint" if c is None else "?", None, None)
    status.start()
    status.stop()
    assert "no checkpoint" == status.text()
