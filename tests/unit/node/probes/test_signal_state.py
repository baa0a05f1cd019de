"""Whether a handler that caught the stop signal is the rank's own: read from the rank bootstrap's signals file."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from elastic.node.probes.signal_state import own_handler, own_handler_in

PID = 4242


def _line(**entry: object) -> str:
    return json.dumps({"time": 1.0, "pid": PID, **entry})


@pytest.mark.parametrize(
    ("lines", "own"),
    [
        ([_line(installed=15, name="SIGTERM", handler="save (train.py:12)")], True),
        ([_line(signal=15, name="SIGTERM", handler="save (train.py:12)", at_exit=False)], True),  # it ran
        ([_line(installed=2, name="SIGINT", handler="stop (train.py:3)")], False),  # another signal's
        ([json.dumps({"installed": 15, "pid": PID + 1, "time": 1.0})], False),  # another process's
        ([_line(preemption_sync=194)], False),
        (['{"installed": 15, "pid": 42', _line(installed=2)], False),  # a torn line is passed over
        (["[15]", "", _line(installed=15)], True),
    ],
)
def test_a_handler_the_rank_itself_installed_for_the_signal_is_its_own(lines: list[str], own: bool) -> None:
    assert own == own_handler_in("\n".join(lines) + "\n", PID, signal.SIGTERM)


def test_no_signals_file_or_none_written_says_no_handler_of_its_own(tmp_path: Path) -> None:
    """The bootstrap creates the file only when the rank installs a handler."""
    assert not own_handler(None, PID, signal.SIGTERM)
    assert not own_handler("", PID, signal.SIGTERM)
    assert not own_handler(str(tmp_path / "rank-0.signals"), PID, signal.SIGTERM)
    written = tmp_path / "rank-1.signals"
    written.write_text(_line(installed=15, name="SIGTERM") + "\n")
    assert own_handler(str(written), PID, signal.SIGTERM)
