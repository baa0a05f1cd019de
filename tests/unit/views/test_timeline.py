"""The timeline of `elastic report`: lanes, phase intervals, goodput, escaping, from hand-made journals."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from elastic.core.failures import FailureKind
from elastic.core.journal.timeline import Span, TimelineError, build_timeline
from elastic.core.labels import short_node
from elastic.views.timeline_html import (
    KIND_COLORS,
    format_s,
    render_html,
    render_svg,
    tick_label,
    tick_step,
)

T0 = datetime(2026, 12, 2, 9, 0, 0, tzinfo=timezone.utc)
SVG = "{http://www.w3.org/2000/svg}"


def ev(t: float, name: str, attempt: int = 0, **fields: Any) -> dict[str, Any]:
    """A journal event ``t`` seconds after T0."""
    return {"event": name, "time": (T0 + timedelta(seconds=t)).isoformat(), "run_id": "r1",
            "attempt": attempt, **fields}


def phase(t: float, attempt: int, source: str, dest: str) -> dict[str, Any]:
    return ev(t, "phase_changed", attempt, source=source, dest=dest, trigger="-", reason="-")


def two_attempts(
    *, checkpoints: tuple[int | None, int | None] = (10, 20), outcome: str = "succeeded",
    first_nodes: tuple[str, str] = ("n0", "n1"),
) -> list[dict[str, Any]]:
    """Attempt 0 on n0+n1 crashes on n1 at 10 s; 3 s of backoff; attempt 1 on n0+n2 ends at 31 s."""
    a, b = first_nodes
    resume = checkpoints[0]
    return [
        ev(0, "run_started"),
        ev(0.5, "attempt_started", 0, world_size=4, nodes=[a, b], nproc_per_node=[2, 2], resume_step=None),
        phase(1, 0, "pending", "launching"),
        phase(2, 0, "launching", "running"),
        ev(10, "worker_failed", 0, kind="crashed", rank=3, node=b, exit_code=None, signal="SIGSEGV", message=None),
        phase(10, 0, "running", "draining"),
        ev(10.5, "worker_failed", 0, kind="collateral", rank=0, node=a, exit_code=None, signal="SIGTERM", message=None),
        ev(11, "workers_stopped", 0, checkpoint_step=checkpoints[0]),
        phase(11, 0, "draining", "pending"),
        ev(12, "backoff_started", 1, delay_s=2.0),
        ev(14.5, "attempt_started", 1, world_size=4, nodes=[a, "n2"], nproc_per_node=[2, 2], resume_step=resume),
        phase(15, 1, "pending", "launching"),
        phase(16, 1, "launching", "running"),
        phase(30, 1, "running", "draining"),
        ev(31, "workers_stopped", 1, checkpoint_step=checkpoints[1]),
        phase(31, 1, "draining", "done"),
        ev(31, "run_finished", 1, outcome=outcome, exit_status=0 if outcome == "succeeded" else 1,
           reason="-", root_cause=None),
    ]


def test_one_lane_per_node_in_the_order_nodes_first_appear() -> None:
    """Every node any attempt ran on gets one lane, first seen first; attempts keep their own nodes."""
    timeline = build_timeline(two_attempts())

    assert ("n0", "n1", "n2") == timeline.lanes
    assert [("n0", "n1"), ("n0", "n2")] == [a.nodes for a in timeline.attempts]
    svg = ET.fromstring(render_svg(timeline))
    assert ["n0", "n1", "n2"] == [g.get("data-lane") for g in svg.iter(f"{SVG}g") if g.get("data-lane")]


def test_phase_intervals_are_cut_at_each_transition_and_backoff_sits_inside_pending() -> None:
    """Each phase runs from one phase_changed to the next; backoff_started carves its delay out of pending."""
    attempts = build_timeline(two_attempts()).attempts

    assert (
        Span("pending", 0, 1), Span("launching", 1, 2), Span("running", 2, 10), Span("draining", 10, 11),
    ) == attempts[0].spans
    assert (
        Span("pending", 11, 12), Span("backoff", 12, 14), Span("pending", 14, 15),
        Span("launching", 15, 16), Span("running", 16, 30), Span("draining", 30, 31),
    ) == attempts[1].spans
    assert (0.0, 11.0, 11.0, 31.0) == (
        attempts[0].start_s, attempts[0].end_s, attempts[1].start_s, attempts[1].end_s
    )
    assert ["running", "running"] == [a.attempt.phase_reached for a in attempts]


def test_failures_carry_kind_rank_node_signal_and_time_and_collateral_is_never_the_cause() -> None:
    """worker_failed events become marks on their attempt; the root cause is the crash, not the SIGTERMed rank."""
    first = build_timeline(two_attempts()).attempts[0].attempt

    assert [("crashed", 3, "n1", "SIGSEGV", 10.0), ("collateral", 0, "n0", "SIGTERM", 10.5)] == [
        (f.kind.value, f.rank, f.node, f.how, f.at_s) for f in first.failures
    ]
    assert first.root_cause is not None and FailureKind.CRASHED is first.root_cause.kind


@pytest.mark.parametrize(
    ("checkpoints", "outcome", "progress"),
    [
        ((10, 20), "succeeded", [True, True]),  # both attempts saved a newer checkpoint
        ((10, 10), "succeeded", [True, False]),  # attempt 1 resumed from 10 and got no further
        ((None, None), "succeeded", [False, True]),  # no checkpoint info: only the successful attempt
        ((None, None), "failed", [False, False]),  # no checkpoint info and no success: none
    ],
)
def test_an_attempt_made_progress_with_a_newer_checkpoint_or_the_runs_successful_end(
    checkpoints: tuple[int | None, int | None], outcome: str, progress: list[bool]
) -> None:
    """Each attempt's progress (report.json's ``progress``); it is not the productive figure."""
    timeline = build_timeline(two_attempts(checkpoints=checkpoints, outcome=outcome))

    assert 31.0 == timeline.duration_s
    assert progress == [a.made_progress for a in timeline.attempts]
    # The page shows one productive figure, the ledger's: unknown, as these attempts showed no step.
    assert '<div class="label">productive training</div><div class="value">unknown</div>' in render_html(timeline)


def test_hostile_names_are_escaped_in_the_page_and_the_svg() -> None:
    """A node called <script> is text everywhere: no markup gets through, the SVG parses back to the name."""
    hostile = '<script>alert("x")</script>'
    events = two_attempts(first_nodes=(hostile, "n1&'\""))
    events[4]["message"] = "</td><img src=x onerror=alert(1)>"
    timeline = build_timeline(events)

    page, svg = render_html(timeline), render_svg(timeline)

    for text in (page, svg):
        assert "<script" not in text and "<img" not in text
        assert "&lt;script&gt;" in text
    lanes = [g.get("data-lane") for g in ET.fromstring(svg).iter(f"{SVG}g") if g.get("data-lane")]
    assert [hostile, "n1&'\"", "n2"] == lanes


def test_the_page_is_self_contained_without_scripts() -> None:
    """No JavaScript and nothing fetched: the only URL is the SVG namespace."""
    page = render_html(build_timeline(two_attempts()))

    assert "<script" not in page.lower()
    assert not re.search(r"\b(src|href)=", page)
    assert {"http://www.w3.org/2000/svg"} == set(re.findall(r"https?://[^\s\"')]+", page))
    assert "Productive training</b> is the goodput ledger's" in page


def test_the_attempts_table_shows_failure_rank_node_signal_and_checkpoint() -> None:
    """One row per attempt with its world size, phase reached, root cause and checkpoint step."""
    page = render_html(build_timeline(two_attempts()))

    rows = re.findall(r'<tr data-attempt="(\d+)">(.*?)</tr>', page)
    assert ["0", "1"] == [number for number, _ in rows]
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", rows[0][1])]
    assert ["4", "running", "crashed", "3", "n1", "SIGSEGV", "10", "yes"] == [cells[i] for i in (3, 4, 5, 6, 7, 8, 9, 10)]


def test_an_unfinished_journal_with_a_cut_off_tail_says_so() -> None:
    """No run_finished: the picture ends at the last event, and the page notes the cut-off line."""
    events = two_attempts()[:13]  # attempt 1 running, driver gone
    timeline = build_timeline(events, truncated_tail=True)

    assert None is timeline.outcome
    assert 16.0 == timeline.duration_s
    assert Span("launching", 15, 16) == timeline.attempts[1].spans[-1]
    page = render_html(timeline)
    assert "last line was cut off" in page and "no <code>run_finished</code>" in page


def test_a_resumed_run_leaves_the_dead_drivers_gap_empty() -> None:
    """run_resumed closes the old driver's open phase at its last event and starts pending anew."""
    events = two_attempts()[:5] + [
        ev(50, "run_resumed", 1, previous_driver_pid=1, failures_charged=0),
        ev(51, "attempt_started", 1, world_size=2, nodes=["n0"], nproc_per_node=[2], resume_step=None),
        phase(52, 1, "pending", "launching"),
        phase(53, 1, "launching", "running"),
    ]
    timeline = build_timeline(events)

    assert Span("running", 2, 10) == timeline.attempts[0].spans[-1]
    assert (Span("pending", 50, 52), Span("launching", 52, 53)) == timeline.attempts[1].spans
    assert (50.0,) == timeline.resumed_at_s


def test_journals_without_events_or_times_are_errors() -> None:
    """An empty journal or an event without a time cannot be drawn: TimelineError says which."""
    with pytest.raises(TimelineError, match="no events"):
        build_timeline([])
    with pytest.raises(TimelineError, match="event 2"):
        build_timeline([ev(0, "run_started"), {"event": "attempt_started"}])


def test_every_failure_kind_has_its_own_colour() -> None:
    """The legend can tell all kinds apart."""
    assert {k.value for k in FailureKind} == set(KIND_COLORS)
    assert len(KIND_COLORS) == len(set(KIND_COLORS.values()))


@pytest.mark.parametrize(
    ("duration_s", "step", "labels"),
    [
        (0.72, 0.1, ["0.0s", "0.1s"]),
        (31.0, 5.0, ["0s", "5s"]),
        (3410.0, 600.0, ["0m", "10m"]),
        (5 * 3600.0, 3600.0, ["0m", "1h"]),
    ],
)
def test_time_axis_ticks_are_round(duration_s: float, step: float, labels: list[str]) -> None:
    """About eight ticks at 1-2-5 seconds or clock minutes and hours."""
    assert step == pytest.approx(tick_step(duration_s))
    assert labels == [tick_label(n * step, step) for n in range(2)]


@pytest.mark.parametrize(
    ("node", "label"),
    [
        ("a3f9c2d1b7e4" + "0" * 44, "a3f9c2d1b7e4"),  # a Ray node id, as everywhere else
        ("gpu-node-17.cluster.example.com", "gpu-node-17"),
        ("10.0.0.12", "10.0.0.12"),
        ("a-very-long-host-name-indeed", "a-very-long-host-…"),
    ],
)
def test_lane_labels_are_short_node_ids_or_hosts(node: str, label: str) -> None:
    """Lane labels fit the label column; the full id stays in the lane's tooltip."""
    assert label == short_node(node)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.4186, "0.42 s"), (42.13, "42.1 s"), (725.0, "12 min 05 s"), (10920.0, "3 h 02 min")],
)
def test_durations_read_naturally(seconds: float, text: str) -> None:
    assert text == format_s(seconds)


def test_a_straggler_is_marked_on_its_nodes_lane_and_noted_on_the_page() -> None:
    """straggler_seen draws a triangle on the straggler's node's lane, titled with rank and ratio,
    and the page notes it; it is no failure."""
    events = two_attempts()
    events.insert(4, ev(6, "straggler_seen", 0, rank=3, node="n1", step=40, step_time_s=0.3, median_s=0.1,
                        ratio=3.0, source="interval", action="warn", reason="--on-straggler warn"))
    timeline = build_timeline(events)

    [mark] = timeline.attempts[0].stragglers
    assert (6.0, 3, "n1", "warn") == (mark.at_s, mark.rank, mark.node, mark.action)
    svg = ET.fromstring(render_svg(timeline))
    [triangle] = [p for p in svg.iter(f"{SVG}polygon") if p.get("data-action") == "warn"]
    assert "rank 3 on n1: 0.3 s a step, 3x the others' median 0.1 s (interval); warned" in (
        triangle.findtext(f"{SVG}title") or ""
    )
    assert "straggler at +6.00 s: rank 3 on n1" in render_html(timeline)
    assert [] == [f for f in timeline.attempts[0].attempt.failures if f.rank == 3 and f.kind is not FailureKind.CRASHED]
