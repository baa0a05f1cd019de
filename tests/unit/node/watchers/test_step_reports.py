"""The node's step reports: the first step at once and which it was, the latest at the report pace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from elastic.core.launch.spec import WorkerSpec
from elastic.core.messages import StepsSeen
from elastic.core.training.stall import ProgressPolicy
from elastic.node.supervisor import RunningWorker
from elastic.node.watchers.steps import REPORT_EVERY_S, StepWatch
from elastic.node.watchers.watcher import Look
from elastic.testing import FakeClock


class _Rank:
    """One rank's log, written as the test says, and a step watch over it on a fake clock."""

    def __init__(self, tmp_path: Path) -> None:
        self.log = tmp_path / "rank-0.log"
        self.log.write_text("")
        self.clock = FakeClock()
        self.sent: list[StepsSeen] = []
        spec = WorkerSpec(attempt=0, rank=0, local_rank=0, node_id="n", argv=("python",), env={},
                          log_path=str(self.log))
        self._running = [RunningWorker(spec, pid=1, started_at=self.clock.monotonic())]
        self.watch = StepWatch("n", [spec], ProgressPolicy(), report=self.sent.append,
                               kill_hung=lambda *_: True, clock=self.clock)

    def prints(self, *steps: int) -> None:
        """One write of these step lines (a burst, flushed once)."""
        with self.log.open("a") as log:
            log.write("".join(f"step {n} loss 2.31\n" for n in steps))

    def look_after(self, seconds: float) -> list[tuple[int, int | None]]:
        """Move the clock on and look once: (step, first_step) of what was sent."""
        self.clock.advance(seconds)
        before = len(self.sent)
        self.watch.tick(self.clock.monotonic(), Look(lambda: self._running, 0))
        return [(s.step, s.first_step) for seen in self.sent[before:] for s in seen.steps]


def test_lines_read_at_once_send_their_highest_step_at_once_and_the_first_as_the_first_step(
    tmp_path: Path,
) -> None:
    """``step 0`` to ``step 3`` in one write: the first report says step 3, first step 0 (before:
    first step 3); later reports carry no first step."""
    rank = _Rank(tmp_path)
    rank.prints(0, 1, 2, 3)
    assert [(3, 0)] == rank.look_after(0.1)
    rank.prints(4)
    assert [(4, None)] == rank.look_after(REPORT_EVERY_S)
    rank.watch.close()


def test_the_latest_step_goes_at_most_every_report_interval_and_is_never_held_longer(tmp_path: Path) -> None:
    """Steps every 0.25 s go once a second (before: every 5 s); the last of a burst followed by
    silence goes at the first look once the interval is up, with nothing more printed."""
    rank = _Rank(tmp_path)
    rank.prints(0)
    assert [(0, 0)] == rank.look_after(0.1)
    sent = []
    for step in range(1, 9):
        rank.prints(step)
        sent.append(rank.look_after(0.25))
    assert [[], [], [], [(4, None)], [], [], [], [(8, None)]] == sent
    rank.prints(9, 10, 11)
    assert [] == rank.look_after(0.25)
    assert [(11, None)] == rank.look_after(REPORT_EVERY_S - 0.25)
    assert [] == rank.look_after(REPORT_EVERY_S)  # nothing new: nothing sent
    rank.watch.close()


def test_a_step_is_placed_when_its_line_was_written_not_when_a_look_found_it(tmp_path: Path) -> None:
    """A first step written 0.4 s before a quiet log's next look is sent as seen 0.4 s earlier
    (before: at the look, which put the goodput ledger's start-up a look late in every attempt);
    never before the look before, whatever the file's time says."""
    rank = _Rank(tmp_path)
    rank.watch.start(rank.clock.monotonic())
    rank.clock.advance(0.1)
    rank.prints(0)
    os.utime(rank.log, (rank.clock.time(), rank.clock.time()))  # written now
    rank.clock.advance(0.4)
    rank.look_after(0.0)
    assert rank.clock.monotonic() - 0.4 == pytest.approx(rank.sent[-1].steps[0].at)
    looked = rank.clock.monotonic()
    rank.prints(1)
    os.utime(rank.log, (rank.clock.time() - 60, rank.clock.time() - 60))  # a time from before the last look
    rank.look_after(REPORT_EVERY_S)
    assert looked == pytest.approx(rank.sent[-1].steps[0].at)
    rank.watch.close()
