"""Whether a handler that caught the stop signal is the rank's own: read from the rank bootstrap's signals file."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from elastic.node.probes.signal_state import OwnHandler, own_handler, own_handler_in

PID = 4242


def _line(**entry: object) -> str:
    return json.dumps({"time": 1.0, "pid": PID, **entry})


INSTALLED, RAN, NONE = OwnHandler(installed=True), OwnHandler(installed=True, ran=True), OwnHandler()


@pytest.mark.parametrize(
    ("lines", "own"),
    [
        ([_line(installed=15, name="SIGTERM", handler="save (train.py:12)")], INSTALLED),
        ([_line(installed=15, name="SIGTERM"), _line(signal=15, name="SIGTERM", at_exit=False)], RAN),
        ([_line(signal=15, name="SIGTERM", handler="save (train.py:12)", at_exit=True)], RAN),  # ran: installed
        ([_line(installed=2, name="SIGINT", handler="stop (train.py:3)"), _line(signal=2)], NONE),  # another signal's
        ([json.dumps({"installed": 15, "signal": 15, "pid": PID + 1, "time": 1.0})], NONE),  # another process's
        ([_line(preemption_sync=194)], NONE),
        (['{"installed": 15, "pid": 42', _line(installed=2)], NONE),  # a torn line is passed over
        (["[15]", "", _line(installed=15)], INSTALLED),
    ],
)
def test_a_handler_the_rank_itself_installed_or_ran_for_the_signal_is_its_own(
    lines: list[str], own: OwnHandler
) -> None:
    assert own == own_handler_in("\n".join(lines) + "\n", PID, signal.SIGTERM)


def test_no_signals_file_or_none_written_says_no_handler_of_its_own(tmp_path: Path) -> None:
    """The bootstrap creates the file only when the rank installs a handler."""
    assert NONE == own_handler(None, PID, signal.SIGTERM)
    assert NONE == own_handler("", PID, signal.SIGTERM)
    assert NONE == own_handler(str(tmp_path / "rank-0.signals"), PID, signal.SIGTERM)
    written = tmp_path / "rank-1.signals"
    written.write_text(_line(installed=15, name="SIGTERM") + "\n")
    assert INSTALLED == own_handler(str(written), PID, signal.SIGTERM)
