"""`elastic report` on a real run with a restart, and the page as headless Chromium renders it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from harness import Finished, Launcher, elastic_command, launcher_env, script

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_TIMEOUT_S = 60.0
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is not installed")

def _run_with_a_restart(launcher: Launcher) -> Finished:
    """Two ranks; attempt 0 exits 3, attempt 1 succeeds."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--max-restarts", 1, "--run-id", "report-test",
        command=script("exit_with.py", 3, "--attempt", 0),
    )
    assert 0 == finished.returncode, finished.explain()
    return finished


def _chromium(tmp_path: Path, *args: str) -> str:
    """Run headless Chromium with a fresh profile (bounded; killed by its pid on timeout): stdout."""
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    process = subprocess.Popen(
        [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", *args,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**launcher_env(), "HOME": str(tmp_path)},
        start_new_session=True,
        text=True,
    )
    try:
        stdout, _ = process.communicate(timeout=CHROMIUM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # its own session: the browser and its helpers
        process.communicate(timeout=10)
        pytest.fail(f"chromium did not finish within {CHROMIUM_TIMEOUT_S}s: {args}")
    assert 0 == process.returncode, f"chromium exited {process.returncode}"
    return stdout


def test_report_draws_a_run_with_a_restart(launcher: Launcher) -> None:
    """`elastic report RUN_DIR` writes RUN_DIR/timeline.html: one lane per node, both attempts, goodput."""
    finished = _run_with_a_restart(launcher)

    shown = elastic_command("report", finished.run_dir)

    assert 0 == shown.returncode, shown.stderr
    page = (finished.run_dir / "timeline.html").read_text()
    nodes = {node for e in finished.events("attempt_started") for node in e["nodes"]}
    assert len(nodes) == page.count("data-lane=")
    assert 2 == page.count("<tr data-attempt=")
    assert "report-test" in page and "exit code 3" in page and 'id="goodput"' in page


def test_report_writes_a_standalone_svg(launcher: Launcher, tmp_path: Path) -> None:
    """`--out X.svg` writes the picture alone, a well-formed SVG document."""
    finished = _run_with_a_restart(launcher)

    shown = elastic_command("report", finished.run_dir, "--out", str(tmp_path / "timeline.svg"))

    assert 0 == shown.returncode, shown.stderr
    svg = ET.parse(tmp_path / "timeline.svg").getroot()
    assert "{http://www.w3.org/2000/svg}svg" == svg.tag


def test_report_of_a_corrupt_journal_names_the_file_and_line(launcher: Launcher) -> None:
    """A corrupt journal line: one line naming file and line, exit status 2, no page."""
    finished = _run_with_a_restart(launcher)
    journal = finished.run_dir / "journal.jsonl"
    lines = journal.read_text().splitlines()
    lines[2] = '{"event": "worker_fai'
    journal.write_text("\n".join(lines) + "\n")

    shown = elastic_command("report", finished.run_dir)

    assert 2 == shown.returncode
    assert [f"elastic: error: {journal}:3: not a JSON event line"] == shown.stderr.splitlines()
    assert not (finished.run_dir / "timeline.html").exists()


def test_report_tolerates_a_cut_off_last_line_and_notes_it(launcher: Launcher) -> None:
    """A last line cut off mid-write (a driver killed while writing) is dropped and noted in the page."""
    finished = _run_with_a_restart(launcher)
    journal = finished.run_dir / "journal.jsonl"
    journal.write_text(journal.read_text() + '{"event": "run_fin')

    shown = elastic_command("report", finished.run_dir)

    assert 0 == shown.returncode, shown.stderr
    assert "last line was cut off" in (finished.run_dir / "timeline.html").read_text()


def test_report_marks_an_injected_kill_in_the_attempt_it_came_in(launcher: Launcher, tmp_path: Path) -> None:
    """A rank SIGKILLed from outside at step 10, the kill written to an events log as a replayer
    writes it: `elastic report --events` draws it in attempt 0 beside the kill elastic recorded, and
    says on stdout which attempt it came in and when attempt 1 stepped again."""
    process = launcher.start("--nproc-per-node", 2, "--max-restarts", 1, "--run-id", "injected-test",
                             command=script("prints_steps.py", "plain", "steps", 80))
    killed_at = launcher.kill_rank_at_step(process, rank=1, step=10)
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"t": killed_at, "kind": "sigkill", "target": "rank 1", "cause": "test"}) + "\n")
    finished = launcher.finished(process)
    assert 0 == finished.returncode, finished.explain()

    shown = elastic_command("report", finished.run_dir, "--events", str(events))
    svg_shown = elastic_command("report", finished.run_dir, "--events", str(events),
                                "--out", str(tmp_path / "timeline.svg"))

    assert 0 == shown.returncode, shown.stderr
    assert 0 == svg_shown.returncode, svg_shown.stderr
    page = (finished.run_dir / "timeline.html").read_text()
    assert 'data-injected="0" data-kind="sigkill" data-attempt="0"' in page  # the line across the lanes
    assert '<tr data-injected="0" data-attempt="0">' in page  # the table's row
    lines = shown.stdout.splitlines()
    assert f"injected events ({events}), from the run's start:" == lines[0]
    assert ": in attempt 0; elastic saw rank 1 on " in lines[1] and " killed (SIGKILL) " in lines[1], lines
    assert "attempt 1's first step " in lines[1], lines
    assert str(finished.run_dir / "timeline.html") == lines[-1]
    svg = ET.parse(tmp_path / "timeline.svg").getroot()
    marked = [e for e in svg.iter("{http://www.w3.org/2000/svg}line") if e.get("data-injected") == "0"]
    assert [("sigkill", "0")] == [(e.get("data-kind"), e.get("data-attempt")) for e in marked]


def test_report_names_the_events_flag_for_a_log_it_cannot_read(launcher: Launcher, tmp_path: Path) -> None:
    """A missing events file, or a line without a time: one line naming --events (and the line), exit 2."""
    finished = _run_with_a_restart(launcher)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "sigkill"}\n')

    missing = elastic_command("report", finished.run_dir, "--events", str(tmp_path / "none.jsonl"))
    unreadable = elastic_command("report", finished.run_dir, "--events", str(bad))

    assert (2, 2) == (missing.returncode, unreadable.returncode)
    assert [f"elastic: error: --events: cannot read {tmp_path / 'none.jsonl'}: No such file or directory"] == (
        missing.stderr.splitlines())
    assert [f'elastic: error: --events: {bad}:1: no time: "t" is Unix seconds or an ISO 8601 time with its zone'] == (
        unreadable.stderr.splitlines())


@needs_chromium
def test_chromium_renders_the_page_with_one_lane_per_node(launcher: Launcher, tmp_path: Path) -> None:
    """Headless Chromium loads the page and the SVG without errors; the DOM has one lane per node."""
    finished = _run_with_a_restart(launcher)
    assert 0 == elastic_command("report", finished.run_dir).returncode
    assert 0 == elastic_command("report", finished.run_dir, "--out", str(tmp_path / "timeline.svg")).returncode
    page = finished.run_dir / "timeline.html"

    dom = _chromium(tmp_path, "--dump-dom", page.as_uri())
    svg_dom = _chromium(tmp_path, "--dump-dom", (tmp_path / "timeline.svg").as_uri())
    screenshot = tmp_path / "timeline.png"
    _chromium(tmp_path, f"--screenshot={screenshot}", "--window-size=1400,900", page.as_uri())

    nodes = {node for e in finished.events("attempt_started") for node in e["nodes"]}
    assert len(nodes) == dom.count("data-lane=")
    assert all(f'data-lane="{node}"' in dom for node in nodes)
    assert "report-test" in dom and "<table" in dom
    # the goodput ledger: a stacked bar for the run and one per attempt
    assert 1 == dom.count('data-ledger="run"') and 2 == dom.count("data-ledger-attempt=")
    for text in (dom, svg_dom):
        assert "parsererror" not in text and "This page contains the following errors" not in text
    assert 'class="timeline"' in svg_dom
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
