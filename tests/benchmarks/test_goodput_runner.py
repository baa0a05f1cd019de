"""The runner's pure parts: elastic's ledger read from report.json, the table, the compression asked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_goodput import parse_args, schedule_and_settings
from goodput.runner import JobResult, Settings, elastic_ledger, format_table
from goodput.schedule import Event, Schedule
from goodput.truth import Truth


def result(launcher: str, goodput_steps: int, ledger: dict[str, object] | None = None) -> JobResult:
    return JobResult(
        launcher,
        "finished",
        wall_s=10.0,
        truth=Truth(wall_s=10.0, steps=goodput_steps + 2, unique_steps=goodput_steps, step_s=0.1,
                    checkpoint_s=0.05, checkpoints=3),
        injected=[{"kind": "sigkill", "t": 1.0}, {"kind": "sigkill", "t": 5.0}, {"kind": "node_lost", "t": 7.0}],
        scheduled=3,
        recoveries=[2.0, 4.0, None],
        starts=2,
        ledger=ledger,
    )


def test_elastic_ledger_is_productive_seconds_over_the_runs_duration(tmp_path: Path) -> None:
    report = {
        "duration_s": 20.0,
        "outcome": "succeeded",
        "ledger": {"productive": 15.0, "startup": 5.0},
        "attempts": [{"failures": [{"kind": "killed"}], "preemption_notice": None},
                     {"failures": [], "preemption_notice": {"source": "signal SIGUSR1"}}],
    }
    (tmp_path / "report.json").write_text(json.dumps(report))
    ledger = elastic_ledger(tmp_path / "report.json")
    assert ledger is not None
    assert (ledger["goodput"], ledger["attempts"], ledger["failures"], ledger["notices"]) == (0.75, 2, 1, 1)
    assert ledger["driver_died"] == 0
    assert elastic_ledger(tmp_path / "missing.json") is None


def test_the_table_puts_truth_ledger_recoveries_and_young_daly_side_by_side() -> None:
    schedule = Schedule("t", 0, 10.0, mtbf_s=4.0, checkpoint_interval_s=1.0, checkpoint_cost_s=0.05,
                        events=(Event(1.0, "sigkill", rank=1),))
    ledger = {"goodput": 0.81, "attempts": 3, "failures": 2, "notices": 0, "driver_died": 0}
    table = format_table([result("elastic", 80, ledger), result("torchrun", 70)], schedule,
                         Settings(step_s=0.1, checkpoint_every=10), {"elastic": 0.9, "torchrun": 0.875})
    lines = table.splitlines()
    assert lines[0] == "|  | elastic | torchrun |"
    assert "| goodput (truth) | 0.800 | 0.700 |" in lines
    assert "| goodput / with no events | 0.89 | 0.80 |" in lines
    assert "| elastic's ledger | 0.810 | - |" in lines
    assert "| disruptions the ledger saw (failed attempts, notices, dead drivers) | 2 (2 failures, 0, 0) | - |" in lines
    assert "| recovery s, sigkill: median / worst (n) | 3.0 / 4.0 (2) | 3.0 / 4.0 (2) |" in lines
    assert "| recovery s, node_lost: median / worst (n) | - | - |" in lines
    assert "| steps kept / redone | 80 / 2 | 70 / 2 |" in lines
    assert "| Young/Daly interval s | 0.63 | 0.63 |" in lines


def test_a_drawn_schedule_is_compressed_to_the_mtbf_in_steps_asked_for() -> None:
    schedule, settings = schedule_and_settings(parse_args(["--mix", "llama3", "--events", "5", "--mtbf-steps", "50",
                                                           "--step-time", "0.2"]))
    assert schedule.mtbf_s == pytest.approx(10.0)
    assert len(schedule.events) == 5
    assert settings.checkpoint_every == round(schedule.checkpoint_interval_s / 0.2)
    assert settings.checkpoint_cost_s == pytest.approx(schedule.checkpoint_cost_s)
    assert schedule.ratios(0.2)["mtbf_steps"] == pytest.approx(50.0)


def test_an_unknown_launcher_or_mix_is_a_one_line_error_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, flag in ((["--launchers", "slurm"], "--launchers"), (["--mix", "tpu"], "--mix")):
        with pytest.raises(SystemExit):
            parse_args(argv)
        assert flag in capsys.readouterr().err


def test_each_injected_event_is_logged_as_elastic_report_reads_it(tmp_path: Path) -> None:
    """One JSON line an event: its wall time, kind, target and cause first, then the replayer's fields."""
    from elastic.core.journal.injected import read_injected
    from goodput.runner import log_injected

    log = tmp_path / "events.jsonl"
    log_injected(log, {"index": 0, "kind": "sigkill", "rank": 1, "t": 100.5, "pid": 7},
                 Event(3.0, "sigkill", rank=1, cause="faulty GPU"))
    log_injected(log, {"index": 1, "kind": "node_lost", "rank": None, "t": 104.0}, Event(6.0, "node_lost"))

    first = json.loads(log.read_text().splitlines()[0])
    assert (first["t"], first["kind"], first["target"], first["cause"], first["pid"]) == (100.5, "sigkill", "rank 1", "faulty GPU", 7)
    assert [(100.5, "sigkill", "rank 1"), (104.0, "node_lost", "node")] == [
        (e.t, e.kind, e.target) for e in read_injected(log.read_text(), source=str(log))]


def test_a_schedules_clock_starts_at_each_jobs_first_step() -> None:
    _, settings = schedule_and_settings(parse_args(["--events", "3"]))
    assert settings.clock == "first-step"


def test_the_smoke_runs_every_launcher_at_once_with_a_burst_inside_its_two_seconds() -> None:
    args = parse_args(["--smoke"])
    schedule, settings = schedule_and_settings(args)
    assert args.launchers == ["elastic", "elastic-ray", "torchrun", "ray-train"]
    assert args.parallel
    assert settings.clock == "first-step"
    assert [(e.kind, e.rank) for e in schedule.events] == [("sigkill", 1), ("sigkill", 0)]
    assert all(e.at_s < schedule.duration_s == 2.0 for e in schedule.events)


def test_launchers_side_by_side_give_no_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--parallel", "--baseline"])
    assert "--parallel" in capsys.readouterr().err
