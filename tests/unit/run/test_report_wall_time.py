"""One wall time for a run: report.json ends where the journal does, whatever the teardown after
`run_finished` costs (an embedded Ray's shutdown took 1.4 s and was in the summary alone)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from elastic.core.journal.fold import fold
from elastic.core.options.config import RunConfig
from elastic.run.driver import Driver
from elastic.run.records.journal import RunDirectory, read_journal
from elastic.testing import FakeBackend, FakeClock


class SlowToCloseBackend(FakeBackend):
    def close(self) -> None:
        self.clock.advance(1.4)  # after run_finished: as an embedded Ray shuts down
        super().close()


def test_the_report_ends_at_run_finished_not_after_the_teardown(tmp_path: Path) -> None:
    backend = SlowToCloseBackend(clock=FakeClock())
    config = RunConfig(command=("train",), run_id="r1", run_dir=tmp_path / "run", nproc_per_node=2)
    driver = Driver(config, backend, RunDirectory.create(config.run_dir), base_env={}, clock=backend.clock)
    thread = threading.Thread(target=driver.run, daemon=True)
    thread.start()
    backend.wait_for_attempt(0)
    backend.clock.advance(3.0)
    backend.exit(0, 0)
    backend.exit(1, 0)
    thread.join(10)
    assert not thread.is_alive()

    report = json.loads((tmp_path / "run" / "report.json").read_text())
    journaled = fold(read_journal(tmp_path / "run" / "journal.jsonl").events).now_s
    assert journaled == pytest.approx(report["duration_s"], abs=1e-6)
    assert report["duration_s"] == pytest.approx(sum(report["ledger"].values()), abs=1e-5)
    assert report["duration_s"] < 3.5
