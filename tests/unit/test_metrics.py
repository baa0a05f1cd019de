"""The metrics renderer and the goodput figure, on plain values."""

from __future__ import annotations

import math

import pytest

from elastic.core.controller import AttemptSummary
from elastic.core.machine import Phase
from elastic.run.metrics import RunMetrics, goodput, render_metrics

parser = pytest.importorskip("prometheus_client.parser")


def attempt(launched: float, drained: float | None, resume: int | None, reached: int | None) -> AttemptSummary:
    return AttemptSummary(attempt=0, started_at=launched, launched_at=launched,
                          ended_at=None if drained is None else drained + 2.0, world_size=2,
                          failures=(), root_cause=None, restarted=False, resume_step=resume,
                          checkpoint_step=reached, drain_started_at=drained)


def test_goodput_counts_running_time_of_attempts_that_made_progress() -> None:
    """Attempts that left a newer checkpoint count; one that did not is lost time."""
    attempts = [attempt(0.0, 40.0, None, 10), attempt(50.0, 60.0, 10, 10), attempt(70.0, None, 10, 12)]
    assert 70.0 / 100.0 == goodput(attempts, started_at=0.0, now=100.0)


def test_goodput_leaves_out_draining_as_the_timeline_report_does() -> None:
    """The running phase ends when the drain begins; stopping the ranks is not useful time."""
    drained_slowly = [attempt(0.0, 40.0, None, 10)]  # ranks took 2 s to stop after 40 s
    assert 40.0 / 50.0 == goodput(drained_slowly, started_at=0.0, now=50.0)


def test_rendered_metrics_parse_with_the_prometheus_parser() -> None:
    """Every family parses; unlimited budgets are +Inf and a missing checkpoint is NaN."""
    text = render_metrics(RunMetrics(
        run_id='we"ird\\id', phase=Phase.RUNNING, attempt=2, world_size=4, ranks_alive=4,
        restarts_by_kind={"killed": 2}, failures_by_kind={"killed": 2, "collateral": 3},
        budget_left={"failures": 1, "preemptions": None}, checkpoint_step=None, goodput=0.5,
        heartbeat_age_s={0: 1.5},
    ))
    samples = {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "run_id"))): s.value
               for family in parser.text_string_to_metric_families(text) for s in family.samples}
    assert 2.0 == samples[("elastic_restarts_total", (("kind", "killed"),))]
    assert math.isinf(samples[("elastic_budget_remaining", (("budget", "preemptions"),))])
    assert math.isnan(samples[("elastic_checkpoint_step", ())])
    assert 1.5 == samples[("elastic_heartbeat_age_seconds", (("rank", "0"),))]
