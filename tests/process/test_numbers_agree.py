"""Numbers that agree: an attempt's time is its ranks', the backoff is apart and out of the relaunch
latency; one productive figure and one wall time in the summary, `elastic status`, report.json and
`elastic report`; plurals right."""

from __future__ import annotations

import re
import sys
from datetime import datetime
from pathlib import Path

from harness import REPO, Launcher, elastic_command, script, status_text

TOY = REPO / "examples" / "toy_train.py"


def summary_line(stderr: str, start: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith(start))


def test_the_backoff_is_apart_from_the_attempt_and_out_of_the_relaunch_latency(launcher: Launcher) -> None:
    """Three attempts of a rank that exits 3 at once, the third after a backoff of 2 s or more: that
    attempt ran a fraction of a second (it was printed as the backoff plus that), and the relaunch
    latency is the launcher's own seconds (it counted the backoff in)."""
    finished = launcher.run("--max-restarts", 2, "--backoff", "2:10", command=script("exit_with.py", 3))

    assert 3 == finished.returncode, finished.explain()
    report = finished.report()
    last = report["attempts"][2]
    assert last["backoff_s"] >= 2.0 and last["waited_s"] >= last["backoff_s"], last
    assert last["duration_s"] < 2.0, last
    assert report["downtime_s"] < 2.0, report["downtime_s"]
    line = summary_line(finished.stderr, "  attempt 2: ")
    assert line.startswith(f"  attempt 2: 1 worker, waited {last['waited_s']:.1f}s (backoff), "
                           f"ran {last['duration_s']:.1f}s, reached running"), line
    latency = summary_line(finished.stderr, "  relaunch latency: ")
    assert latency == (f"  relaunch latency: {report['downtime_s']:.2f}s from failure to the next attempt's ranks "
                       f"running (backoff apart: {report['ledger']['backoff']:.1f}s)")
    assert "failures budget exhausted (2 restarts in the run)" in finished.stderr


def test_plurals_are_right(launcher: Launcher) -> None:
    """One worker, one restart, one node: singular in the summary, the reason and `elastic status`."""
    finished = launcher.run("--max-restarts", 1, command=script("exit_with.py", 3))

    assert 3 == finished.returncode, finished.explain()
    assert "failures budget exhausted (1 restart in the run)" in finished.stderr
    # "1 worker," then how long it ran (after "waited 0.1s (for nodes)" where a loaded machine took that long)
    assert re.match(r"  attempt 0: 1 worker, (waited [^,]+, )?ran ", summary_line(finished.stderr, "  attempt 0: "))
    assert ["1 worker planned", "1 worker started"] == [
        e["reason"] for e in finished.events("phase_changed") if e["attempt"] == 0 and e["source"] in ("pending", "launching")
    ]
    assert "workers" not in finished.stderr and "restarts in" not in finished.stderr


def test_one_productive_figure_and_one_wall_time_in_summary_status_report_and_page(
    launcher: Launcher, tmp_path: Path
) -> None:
    """The toy showing steps, rank 1 killed once: the summary, `elastic status`, report.json and
    `elastic report`'s page give the ledger's productive share and the run's wall time alike (the
    page's card showed another figure, the running time of attempts with checkpoint progress; the
    summary's wall time ran past the run's last record to the end of the teardown)."""
    finished = launcher.run("--max-restarts", 1, "--nproc-per-node", 2, "--checkpoint-dir", tmp_path / "ckpt",
                            command=[sys.executable, TOY, "--fail-at-step", 5, "--step-time", 0.1])

    assert 0 == finished.returncode, finished.explain()
    report = finished.report()
    wall_s = report["duration_s"]
    share = report["ledger"]["productive"] / wall_s
    [run_finished] = finished.events("run_finished")
    assert wall_s == round(sum(report["ledger"].values()), 6)
    assert f"in {wall_s:.1f}s (exit status 0)" in finished.stderr
    assert f"productive training {report['ledger']['productive']:.1f}s ({share:.0%})" in finished.stderr
    status = status_text(finished.run_dir)
    assert f"where the time went ({wall_s:.1f}s):" in status, status
    assert re.search(rf"^  productive training +{report['ledger']['productive']:.1f}s +{share:.0%}$", status, re.M), status
    page_path = tmp_path / "page.html"
    assert 0 == elastic_command("report", finished.run_dir, "--out", page_path).returncode
    page = page_path.read_text()
    assert f'<div class="label">productive training</div><div class="value">{share:.1%}</div>' in page
    ended_at, finished_at = (datetime.fromisoformat(t) for t in (report["ended_at"], run_finished["time"]))
    assert abs((ended_at - finished_at).total_seconds()) < 0.002, (report["ended_at"], run_finished["time"])
