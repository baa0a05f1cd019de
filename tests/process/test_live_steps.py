"""The live step keeps up with a rank that prints its steps in bursts and one at a time (only rank 0
printing, as in a DDP script): `elastic status` and the status line show the step printed within
their intervals, and the first step recorded is the first the rank printed."""

from __future__ import annotations

import re
import time
from pathlib import Path

from harness import Launcher, on_a_terminal, script, status_text, wait_for

# How far `elastic status` may be behind what the rank printed, as the docs promise it: the node's
# report pace (elastic.node.watchers.steps.REPORT_EVERY_S, 1 s), then state.json's write pace
# (elastic.run.driver.STATE_STEP_EVERY_S, 1 s), and a second for the node's look (every 0.5 s at
# most) and this shared machine's scheduling. Not a speed: the bound the two intervals promise.
LAG_S = 3.0
PAUSE_S = LAG_S + 12.0  # the silence after the last burst: `elastic status` is run within it
LAST_STEP = 94


def _printed(side: Path) -> list[tuple[int, float]]:
    """What the rank noted it had printed: (highest step, wall time once flushed), in order."""
    try:
        lines = side.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [(int(step), float(at)) for step, at in (line.split() for line in lines if line != "done")]


def _printed_by(side: Path, at: float) -> int:
    """The highest step the rank had printed by wall time ``at`` (-1: none)."""
    return max((step for step, when in _printed(side) if when <= at), default=-1)


def _training_step(shown: str) -> int:
    found = re.search(r"^training step: (\d+) ", shown, re.M)
    assert found is not None, shown
    return int(found.group(1))


def test_elastic_status_shows_the_step_printed_within_its_interval_and_the_first_step_is_the_first_printed(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Mid-run, `elastic status` (a real subprocess) shows at least the step the rank had printed
    LAG_S before it was asked, and once the rank goes quiet after a burst, that burst's last step
    (before: the step of the node's report five seconds earlier, or the first step, until an
    unrelated record). The first step journaled is 0, printed in one write with 1 to 4 (before: 4)."""
    side = tmp_path / "printed"
    process = launcher.start("--nproc-per-node", 2, command=script("prints_bursts.py", side, PAUSE_S))

    for step in (25, 45, 65):  # while it prints a step every 0.15 s
        wait_for(lambda step=step: _printed_by(side, time.time()) >= step, f"rank 0 at step {step}", timeout_s=60)
        asked_at = time.time()
        during = _training_step(status_text(launcher.run_dir))
        answered_at = time.time()
        assert _printed_by(side, asked_at - LAG_S) <= during <= _printed_by(side, answered_at), (during, _printed(side))

    burst_at = wait_for(lambda: dict(_printed(side)).get(LAST_STEP), "the last burst", timeout_s=60)
    time.sleep(max(0.0, burst_at + LAG_S - time.time()))
    paused = _training_step(status_text(launcher.run_dir))
    assert time.time() < burst_at + PAUSE_S, "the rank's pause ended before `elastic status` answered"
    assert LAST_STEP == paused

    finished = launcher.finished(process, timeout_s=PAUSE_S + 60)
    assert 0 == finished.returncode, finished.explain()
    [first] = finished.events("first_step_seen")
    assert (0, 0) == (first["rank"], first["step"])
    assert re.search(r"^attempt 0: first step 0 ", status_text(launcher.run_dir), re.M)
    assert LAST_STEP == finished.report()["attempts"][0]["step_reached"]["step"]


def test_the_status_line_shows_a_bursts_last_step_while_the_rank_is_quiet(tmp_path: Path) -> None:
    """On a terminal, after the last burst and before the run ends, the status line is drawn
    with that burst's last step though no line is written above it meanwhile."""
    status, screen = on_a_terminal(tmp_path, "--nproc-per-node", 2,
                                   command=script("prints_bursts.py", tmp_path / "printed", LAG_S + 3.0))

    assert 0 == status, screen[-3000:]
    after_burst = screen[screen.rindex(f"step {LAST_STEP} loss"):]
    shown = [int(step) for step in re.findall(r"\| step (\d+) \|", after_burst)]
    assert LAST_STEP in shown, after_burst[-3000:]
