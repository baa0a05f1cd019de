"""The timeline's marks of events injected from outside (`elastic report --events`), on a hand-made run."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from typing import Any

from elastic.core.journal.injected import place_injected, read_injected
from elastic.core.journal.timeline import build_timeline
from elastic.views.timeline_html import render_html, render_svg

T0 = datetime(2026, 12, 2, 9, 0, 0, tzinfo=timezone.utc)
SVG = "{http://www.w3.org/2000/svg}"


def ev(t: float, name: str, attempt: int = 0, **fields: Any) -> dict[str, Any]:
    return {"event": name, "time": (T0 + timedelta(seconds=t)).isoformat(), "run_id": "r1",
            "attempt": attempt, **fields}


def phase(t: float, attempt: int, source: str, dest: str) -> dict[str, Any]:
    return ev(t, "phase_changed", attempt, source=source, dest=dest, trigger="-", reason="-")


def killed_and_restarted() -> list[dict[str, Any]]:
    """Attempt 0 steps from 3 s; rank 1 is killed at 10.2 s; attempt 1 steps again at 16 s; the run ends at 31 s."""
    return [
        ev(0, "run_started"),
        ev(0.5, "attempt_started", 0, world_size=2, nodes=["n0"], nproc_per_node=[2], resume_step=None),
        phase(1, 0, "pending", "launching"),
        phase(2, 0, "launching", "running"),
        ev(3, "first_step_seen", 0, rank=0, step=1, source="output"),
        ev(10.2, "worker_failed", 0, kind="killed", rank=1, node="n0", exit_code=None, signal="SIGKILL", message=None),
        phase(10.2, 0, "running", "draining"),
        ev(11, "workers_stopped", 0, checkpoint_step=None),
        phase(11, 0, "draining", "pending"),
        ev(12, "attempt_started", 1, world_size=2, nodes=["n0"], nproc_per_node=[2], resume_step=None),
        phase(13, 1, "pending", "launching"),
        phase(14, 1, "launching", "running"),
        ev(16, "first_step_seen", 1, rank=0, step=1, source="output"),
        phase(30, 1, "running", "draining"),
        ev(31, "workers_stopped", 1, checkpoint_step=None),
        phase(31, 1, "draining", "done"),
        ev(31, "run_finished", 1, outcome="succeeded", exit_status=0, reason="-", root_cause=None),
    ]


def line(t: float | str, kind: str = "sigkill", **fields: Any) -> str:
    return json.dumps({"t": t, "kind": kind, **fields})


def test_the_picture_and_the_page_mark_each_injected_event_in_its_attempt() -> None:
    """A dashed line across the lanes per event within the run, labelled with its kind; a table row on the page."""
    timeline = build_timeline(killed_and_restarted())
    marks = place_injected(timeline, read_injected(
        "\n".join([line(T0.timestamp() + 10.0, target="rank 1"), line(T0.timestamp() - 5.0, "exception")]),
        source="e"))

    svg = ET.fromstring(render_svg(timeline, injected=marks))
    lines = [e for e in svg.iter(f"{SVG}line") if e.get("data-injected")]
    page = render_html(timeline, injected=marks)

    assert [("sigkill", "0")] == [(e.get("data-kind"), e.get("data-attempt")) for e in lines]
    assert "sigkill" in [e.text for e in svg.iter(f"{SVG}text") if e.get("class") == "injected-label"]
    assert 'data-injected="1" data-kind="sigkill" data-attempt="0"' in page
    assert '<tr data-injected="0" data-attempt="">' in page and '<tr data-injected="1" data-attempt="0">' in page
    assert "Injected events" not in render_html(timeline)
