"""A re-forming rank beats from a thread of its own until stopped, and the rank's own beats after
it never meet that thread's (elastic.worker.inplace.alive)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from elastic.worker import heartbeat as beacon
from elastic.worker.heartbeat import HEARTBEAT_FILE_VAR
from elastic.worker.inplace.alive import FormingBeat


def test_a_forming_generation_beats_without_a_step_until_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rank-1.heartbeat"
    monkeypatch.setenv(HEARTBEAT_FILE_VAR, str(path))
    beacon.rebind()
    try:
        forming = FormingBeat().start()
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        first = json.loads(path.read_text())
        time.sleep(3 * beacon.BEAT_INTERVAL_S)
        assert json.loads(path.read_text())["time"] > first["time"], "it went on beating"
        assert first["step"] is None
        forming.stop()
        stopped = path.read_text()
        time.sleep(3 * beacon.BEAT_INTERVAL_S)
        assert stopped == path.read_text(), "no beat after stop()"
        beacon.heartbeat(step=7)  # the rank's own step (beats are at most one an interval): the file is its alone
        assert 7 == json.loads(path.read_text())["step"]
    finally:
        monkeypatch.delenv(HEARTBEAT_FILE_VAR)
        beacon.rebind()
