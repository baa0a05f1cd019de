"""The metrics renderer, on plain values (goodput is the fold's: tests/unit/test_fold.py)."""

from __future__ import annotations

import math

import pytest

from elastic.core.machine import Phase
from elastic.run.metrics import RunMetrics, render_metrics

parser = pytest.importorskip("prometheus_client.parser")


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
