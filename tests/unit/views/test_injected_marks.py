"""The timeline's marks of events injected from outside (`elastic report --events`), on a hand-made run."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

from elastic.core.journal.injected import place_injected, read_injected
from elastic.core.journal.timeline import build_timeline
from elastic.views.timeline_html import render_html, render_svg
from journal_events import T0, killed_and_restarted

SVG = "{http://www.w3.org/2000/svg}"


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
