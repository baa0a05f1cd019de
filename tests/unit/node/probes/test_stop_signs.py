"""A rank's signals file read by its node: the ages of its catches count to the moment given (the
rank's exit), not to when the file happened to be read."""

from __future__ import annotations

import json
from pathlib import Path

from elastic.node.probes.stop_signs import read_signals_file


def test_a_catch_is_aged_to_the_exit_its_node_saw_not_to_the_later_reading(tmp_path: Path) -> None:
    signals = tmp_path / "signals.jsonl"
    signals.write_text(json.dumps({"signal": 15, "name": "SIGTERM", "at_exit": False, "time": 1_000.0}) + "\n")

    seen = read_signals_file(str(signals), now=1_002.5)

    assert seen is not None
    [caught] = seen.caught
    assert 2.5 == caught.age_s
    assert read_signals_file(str(tmp_path / "none.jsonl"), now=1_002.5) is None
