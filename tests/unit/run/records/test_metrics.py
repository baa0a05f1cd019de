"""The metrics renderer, on plain values (the ledger they come from: tests/unit/core/journal/test_goodput_ledger.py)."""

from __future__ import annotations

import math

import pytest

from elastic.core.controller.machine import Phase
from elastic.run.records.metrics import RunMetrics, render_metrics

parser = pytest.importorskip("prometheus_client.parser")


def test_rendered_metrics_parse_with_the_prometheus_parser() -> None:
    """Every family parses; unlimited budgets are +Inf and a missing checkpoint is NaN."""
    text = render_metrics(RunMetrics(
        run_id='we"ird\\id', phase=Phase.RUNNING, attempt=2, world_size=4, ranks_alive=4,
        restarts_by_kind={"killed": 2}, failures_by_kind={"killed": 2, "collateral": 3},
        budget_left={"failures": 1, "preemptions": None}, checkpoint_step=None, productive_share=0.5,
        heartbeat_age_s={0: 1.5},
    ))
    samples = {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "run_id"))): s.value
               for family in parser.text_string_to_metric_families(text) for s in family.samples}
    assert 2.0 == samples[("elastic_restarts_total", (("kind", "killed"),))]
    assert math.isinf(samples[("elastic_budget_remaining", (("budget", "preemptions"),))])
    assert math.isnan(samples[("elastic_checkpoint_step", ())])
    assert 1.5 == samples[("elastic_heartbeat_age_seconds", (("rank", "0"),))]


def test_the_goodput_ledger_is_exported_as_seconds_by_cause() -> None:
    """Productive seconds in their own counter; every other cause of the ledger as a badput cause."""
    from elastic.core.journal.ledger import BADPUT_CAUSES

    text = render_metrics(RunMetrics(
        run_id="r", phase=Phase.RUNNING, attempt=1, world_size=2, ranks_alive=2,
        restarts_by_kind={}, failures_by_kind={}, budget_left={"failures": 1, "preemptions": None},
        checkpoint_step=10, productive_share=0.5, ledger={"productive": 40.0, "backoff": 3.0, "redone": 7.5},
    ))
    samples = {(s.name, s.labels.get("cause")): s.value
               for family in parser.text_string_to_metric_families(text) for s in family.samples}
    assert 40.0 == samples[("elastic_goodput_seconds_total", None)]
    assert 3.0 == samples[("elastic_badput_seconds_total", "backoff")]
    assert 7.5 == samples[("elastic_badput_seconds_total", "redone")]
    assert {c for n, c in samples if n == "elastic_badput_seconds_total"} == set(BADPUT_CAUSES)


def test_step_times_and_stragglers_are_exported_by_rank_with_the_node() -> None:
    """elastic_step_time_seconds{rank} for each timed rank; elastic_straggler{rank,node} is 1 for each straggler."""
    text = render_metrics(RunMetrics(
        run_id="r", phase=Phase.RUNNING, attempt=0, world_size=3, ranks_alive=3,
        restarts_by_kind={}, failures_by_kind={}, budget_left={"failures": 0, "preemptions": None},
        checkpoint_step=None, productive_share=None, step_time_by_rank={0: 0.1, 1: 0.1, 2: 0.2}, stragglers=((2, "n1"),),
    ))
    samples = {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "run_id"))): s.value
               for family in parser.text_string_to_metric_families(text) for s in family.samples}
    assert 0.2 == samples[("elastic_step_time_seconds", (("rank", "2"),))]
    assert 1.0 == samples[("elastic_straggler", (("node", "n1"), ("rank", "2")))]
    assert 1 == sum(1 for name, _ in samples if name == "elastic_straggler")
