"""Drawing a :class:`~elastic.core.journal.timeline.Timeline` as SVG: lanes, phase bars, failure dots, axis, legend.

:mod:`elastic.views.timeline_html` wraps it in the HTML page.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from elastic.core.journal.injected import InjectedMark
from elastic.core.journal.timeline import Timeline
from elastic.core.labels import plural, short_node

__all__ = [
    "FONT",
    "INJECTED_COLOR",
    "KIND_COLORS",
    "PHASE_COLORS",
    "STRAGGLER_COLOR",
    "escape",
    "format_s",
    "kind_color",
    "render_svg",
    "short_node",
    "tick_label",
    "tick_step",
]

PHASE_COLORS = {
    "running": "#2f9e44",
    "launching": "#74c0fc",
    "draining": "#f59f00",
    "pending": "#ced4da",
    "backoff": "#9775fa",
}
KIND_COLORS = {
    "exited": "#e8590c",
    "crashed": "#c92a2a",
    "killed": "#f06595",
    "terminated": "#1c7ed6",
    "preempted": "#0ca678",
    "hung": "#5f3dc4",
    "exit-hung": "#b08900",
    "node-lost": "#212529",
    "launch-failed": "#862e9c",
    "collateral": "#adb5bd",
}
_UNKNOWN_KIND_COLOR = "#495057"
INJECTED_COLOR = "#d6336c"  # an event injected from outside (--events): a line across the lanes
STRAGGLER_COLOR = "#e67700"  # a triangle on the straggler's node's lane: not a failure, unlike the dots


# -- helpers for drawing ----------------------------------------------------------------


def escape(value: object) -> str:
    return html.escape(str(value), quote=True)


def format_s(seconds: float) -> str:
    """``0.42 s``, ``42.1 s``, ``12 min 05 s``, ``3 h 02 min``."""
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


_CLOCK_STEPS_S = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def tick_step(duration_s: float, ticks: int = 8) -> float:
    """A round step giving about ``ticks`` ticks: 1-2-5 seconds, then clock-like minutes and hours."""
    raw = max(duration_s, 1e-3) / ticks
    if raw > 30:
        return float(next((s for s in _CLOCK_STEPS_S if s >= raw), 86400 * math.ceil(raw / 86400)))
    base = 10.0 ** math.floor(math.log10(raw))
    return next(m * base for m in (1, 2, 5, 10) if m * base >= raw)


def tick_label(seconds: float, step: float) -> str:
    """``0.25s``, ``40s``, ``15m``, ``1h30``."""
    if step < 60:
        digits = max(0, -math.floor(math.log10(step))) if step < 1 else 0
        return f"{seconds:.{digits}f}s"
    hours, minutes = divmod(int(round(seconds)) // 60, 60)
    if hours == 0:
        return f"{minutes}m"
    return f"{hours}h{minutes:02d}" if minutes else f"{hours}h"


# -- the picture --------------------------------------------------------------------------

_W, _LEFT, _RIGHT = 1200, 170, 28
_LANE_H, _BAR_Y, _BAR_H = 56, 20, 24
_INJECTED_ROW_H = 32  # the two rows of the injected events' labels, between the ticks and the legend
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', Arial, sans-serif"
_SVG_STYLE = f"""
text {{ font-family: {FONT}; fill: #212529; }}
.title {{ font-size: 18px; font-weight: 600; }}
.sub {{ font-size: 12.5px; fill: #495057; }}
.lane-bg {{ fill: #f1f3f5; fill-opacity: .6; }}
.lane-name {{ font-size: 13px; font-weight: 600; }}
.lane-info, .tick, .attempt-label, .legend {{ font-size: 11.5px; fill: #495057; }}
.cause-label {{ font-size: 11.5px; font-weight: 600; }}
.attempt-line {{ stroke: #868e96; stroke-dasharray: 4 3; }}
.resume-line {{ stroke: #e03131; stroke-width: 1.5; stroke-dasharray: 2 3; }}
.axis {{ stroke: #adb5bd; }}
.injected-line {{ stroke: {INJECTED_COLOR}; stroke-width: 1.5; stroke-dasharray: 6 3; }}
.injected-label {{ font-size: 11px; font-weight: 600; fill: {INJECTED_COLOR}; }}
.grid {{ stroke: #e9ecef; }}
.mark {{ stroke: #fff; stroke-width: 1.5; }}
.mark.cause {{ stroke: #212529; stroke-width: 2; }}
""" + "".join(f".ph-{name} {{ fill: {color}; }}\n" for name, color in PHASE_COLORS.items()) + (
    ".ph-backoff { fill: url(#backoff-hatch); }\n"
)


@dataclass(frozen=True)
class _Frame:
    """Where things go: the timeline, the top of the first lane, the axis line, the injected events."""

    timeline: Timeline
    top: float
    injected: tuple[InjectedMark, ...] = ()

    @property
    def legend_top(self) -> float:
        """Below the axis, and below the injected events' labels when there are some."""
        return self.bottom + 38 + (_INJECTED_ROW_H if self.injected else 0)

    @property
    def bottom(self) -> float:
        return self.top + max(len(self.timeline.lanes), 1) * _LANE_H + 4

    def x(self, at_s: float) -> float:
        span = self.timeline.duration_s if self.timeline.duration_s > 0 else 1.0
        return _LEFT + (_W - _LEFT - _RIGHT) * min(max(at_s, 0.0), span) / span

    def lane_top(self, node: str) -> float:
        return self.top + self.timeline.lanes.index(node) * _LANE_H


class _Shelf:
    """Text labels on one row that must not overlap; widths are estimated."""

    def __init__(self, char_px: float) -> None:
        self._char_px = char_px
        self._taken: list[tuple[float, float]] = []

    def place(self, x: float, text: str, gap: float) -> tuple[float, str] | None:
        """``gap`` to the right of ``x``, else to its left: (x, text-anchor), or None if full."""
        width = self._char_px * len(text)
        for start, anchor in ((x + gap, "start"), (x - gap - width, "end")):
            end = start + width
            if start >= _LEFT and end <= _W - 4 and all(end < a or start > b for a, b in self._taken):
                self._taken.append((start - 6, end + 6))
                return (start if anchor == "start" else end), anchor
        return None


def kind_color(kind: str) -> str:
    return KIND_COLORS.get(kind, _UNKNOWN_KIND_COLOR)


def _headline(timeline: Timeline) -> str:
    outcome = timeline.outcome or "not finished"
    share = timeline.productive_share
    productive = "no step information" if share is None else f"productive {share:.0%}"
    return (
        f"{outcome} · {plural(len(timeline.attempts), 'attempt')} · "
        f"{format_s(timeline.duration_s)} · {productive} · "
        f"started {timeline.started_at.isoformat(sep=' ', timespec='seconds')}"
    )


def _lanes(frame: _Frame) -> list[str]:
    timeline = frame.timeline
    ranks: dict[str, int] = {}
    for attempt in timeline.attempts:
        ranks.update(zip(attempt.nodes, attempt.nproc_per_node))
    rows: list[str] = []
    for node in timeline.lanes:
        top = frame.lane_top(node)
        info = f"{ranks[node]} rank{'s' if ranks[node] != 1 else ''}" if node in ranks else ""
        rows.append(
            f'<g class="lane" data-lane="{escape(node)}"><title>node {escape(node)}</title>'
            f'<rect class="lane-bg" x="{_LEFT}" y="{top + 4}" width="{_W - _LEFT - _RIGHT}" '
            f'height="{_LANE_H - 8}" rx="4"/>'
            f'<text class="lane-name" x="{_LEFT - 12}" y="{top + 30}" text-anchor="end">'
            f"{escape(short_node(node))}</text>"
            f'<text class="lane-info" x="{_LEFT - 12}" y="{top + 45}" text-anchor="end">{info}</text>'
        )
        for attempt in timeline.attempts:
            if node not in timeline.lanes_of(attempt):
                continue
            for span in attempt.spans:
                x0, x1 = frame.x(span.start_s), frame.x(span.end_s)
                rows.append(
                    f'<rect class="ph-{escape(span.phase)}" x="{x0:.1f}" y="{top + _BAR_Y}" '
                    f'width="{max(x1 - x0, 1.0):.1f}" height="{_BAR_H}"><title>attempt '
                    f"{attempt.number}: {escape(span.phase)} {format_s(span.end_s - span.start_s)} "
                    f"(+{span.start_s:.3f} s to +{span.end_s:.3f} s)</title></rect>"
                )
        rows.append("</g>")
    return rows


def _lane_point(frame: _Frame, node: str | None, at_s: float) -> tuple[float, float] | None:
    """Where a mark at ``at_s`` sits on ``node``'s lane: the middle of its bar; None without a lane."""
    if node is None or node not in frame.timeline.lanes:
        return None
    return frame.x(at_s), frame.lane_top(node) + _BAR_Y + _BAR_H / 2


def _markers(frame: _Frame) -> list[str]:
    """A dot per failed rank on its node's lane; root causes ringed, labelled where there is room."""
    timeline = frame.timeline
    attempts = [a.attempt for a in timeline.attempts]
    causes = [a.root_cause for a in attempts if a.root_cause is not None]
    others = [f for a in attempts for f in a.failures if f not in causes]
    marks: list[str] = []
    shelves: dict[str, _Shelf] = {}
    for counted in (c for a in attempts for c in a.collateral_counted):
        if (point := _lane_point(frame, counted.node, counted.at_s)) is None:
            continue
        x, y = point
        marks.append(
            f'<circle class="mark" data-kind="collateral" cx="{x:.1f}" cy="{y:.1f}" r="4.5" '
            f'fill="{kind_color("collateral")}"><title>{escape(counted.describe())} '
            f"(counted, not journaled one by one) by +{counted.at_s:.3f} s</title></circle>"
        )
    for failure in others + causes:  # causes last: drawn on top
        if (point := _lane_point(frame, failure.node, failure.at_s)) is None:
            continue
        cause = failure in causes
        x, y = point
        marks.append(
            f'<circle class="mark{" cause" if cause else ""}" data-kind="{escape(failure.kind.value)}" '
            f'cx="{x:.1f}" cy="{y:.1f}" r="{7 if cause else 4.5}" fill="{kind_color(failure.kind.value)}">'
            f"<title>{escape(failure.describe())} at +{failure.at_s:.3f} s</title></circle>"
        )
    for straggler in (s for a in timeline.attempts for s in a.stragglers):
        if (point := _lane_point(frame, straggler.node, straggler.at_s)) is None:
            continue
        x, y = point
        marks.append(
            f'<polygon class="mark straggler" data-action="{escape(straggler.action)}" '
            f'points="{x:.1f},{y - 7:.1f} {x + 6:.1f},{y + 5:.1f} {x - 6:.1f},{y + 5:.1f}" '
            f'fill="{STRAGGLER_COLOR}"><title>straggler: {escape(straggler.text)} '
            f"at +{straggler.at_s:.3f} s</title></polygon>"
        )
        label = f"rank {straggler.rank} straggler {straggler.ratio:.2f}x"
        spot = shelves.setdefault(straggler.node, _Shelf(7.0)).place(x, label, gap=9)
        if spot is not None:
            marks.append(
                f'<text class="cause-label" x="{spot[0]:.1f}" y="{y - 16:.1f}" text-anchor="{spot[1]}" '
                f'fill="{STRAGGLER_COLOR}">{escape(label)}</text>'
            )
    for failure in reversed(causes):  # the latest first: the run's own root cause gets its label
        if failure.node not in timeline.lanes:
            continue
        label = f"rank {failure.rank} {failure.kind.value}" + (f" ({failure.how})" if failure.how else "")
        label += f" [{failure.diagnosis.signature}]" if failure.diagnosis else ""
        x = frame.x(failure.at_s)
        spot = shelves.setdefault(failure.node, _Shelf(7.0)).place(x, label, gap=9)
        if spot is not None:
            y = frame.lane_top(failure.node) + _BAR_Y - 6
            marks.append(
                f'<text class="cause-label" x="{spot[0]:.1f}" y="{y:.1f}" text-anchor="{spot[1]}" '
                f'fill="{kind_color(failure.kind.value)}">{escape(label)}</text>'
            )
    return marks


def _axis(frame: _Frame) -> list[str]:
    duration, bottom = frame.timeline.duration_s, frame.bottom
    step = tick_step(duration)
    parts = [f'<line class="axis" x1="{_LEFT}" y1="{bottom}" x2="{_W - _RIGHT}" y2="{bottom}"/>']
    for n in range(int(duration / step + 1e-9) + 1):
        x = frame.x(n * step)
        parts.append(
            f'<line class="grid" x1="{x:.1f}" y1="{frame.top}" x2="{x:.1f}" y2="{bottom}"/>'
            f'<line class="axis" x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 5}"/>'
            f'<text class="tick" x="{x:.1f}" y="{bottom + 19}" '
            f'text-anchor="{"start" if n == 0 else "middle"}">{tick_label(n * step, step)}</text>'
        )
    parts.append(
        f'<text class="tick" x="{_LEFT - 12}" y="{bottom + 19}" text-anchor="end">since start</text>'
    )
    return parts


def _attempt_lines(frame: _Frame) -> list[str]:
    parts: list[str] = []
    shelf = _Shelf(6.3)
    y0, y1 = frame.top - 18, frame.bottom
    for attempt in frame.timeline.attempts:
        x = frame.x(attempt.start_s)
        if attempt.start_s > 0:
            parts.append(f'<line class="attempt-line" x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}"/>')
        for text in (f"attempt {attempt.number}", str(attempt.number)):
            spot = shelf.place(x, text, gap=4)
            if spot is not None:
                parts.append(
                    f'<text class="attempt-label" x="{spot[0]:.1f}" y="{frame.top - 6}" '
                    f'text-anchor="{spot[1]}">{text}</text>'
                )
                break
    for at_s in frame.timeline.resumed_at_s:
        x = frame.x(at_s)
        parts.append(
            f'<line class="resume-line" x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}">'
            "<title>a new driver resumed the run</title></line>"
        )
    return parts


def _injected(frame: _Frame) -> list[str]:
    """A dashed line across the lanes at each injected event, its kind labelled below the axis."""
    parts: list[str] = []
    shelves = (_Shelf(6.3), _Shelf(6.3))
    y0, y1 = frame.top - 18, frame.bottom
    for number, mark in enumerate(frame.injected):
        if not 0 <= mark.at_s <= frame.timeline.duration_s:
            continue  # before the run's start or after its last record: listed, not drawn
        x = frame.x(mark.at_s)
        event = mark.event
        attempt = "" if mark.attempt is None else f' data-attempt="{mark.attempt}"'
        parts.append(
            f'<line class="injected-line" data-injected="{number}" data-kind="{escape(event.kind)}"{attempt} '
            f'x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}"><title>injected: {escape(mark.describe())}</title></line>'
        )
        for row, shelf in enumerate(shelves):  # a second row for labels that do not fit the first
            spot = shelf.place(x, event.kind, gap=3)
            if spot is not None:
                parts.append(
                    f'<text class="injected-label" x="{spot[0]:.1f}" y="{y1 + 34 + 13 * row}" '
                    f'text-anchor="{spot[1]}">{escape(event.kind)}</text>'
                )
                break
    return parts


def _legend(frame: _Frame) -> list[str]:
    top = frame.legend_top
    parts = [f'<text class="legend" x="{_LEFT - 12}" y="{top + 10}" text-anchor="end">phases</text>']
    x = float(_LEFT)
    for phase in ("running", "launching", "draining", "pending", "backoff"):
        label = "pending / waiting" if phase == "pending" else phase
        parts.append(
            f'<rect class="ph-{phase}" x="{x:.1f}" y="{top}" width="22" height="12" rx="2"/>'
            f'<text class="legend" x="{x + 28:.1f}" y="{top + 10}">{label}</text>'
        )
        x += 44 + 6.5 * len(label)
    kinds = sorted({f.kind.value for a in frame.timeline.attempts for f in a.attempt.failures})
    row = top + 24
    parts.append(f'<text class="legend" x="{_LEFT - 12}" y="{row + 10}" text-anchor="end">failures</text>')
    x = float(_LEFT)
    if any(a.stragglers for a in frame.timeline.attempts):
        parts.append(
            f'<polygon class="mark straggler" points="{x + 7:.1f},{row} {x + 13:.1f},{row + 12} '
            f'{x + 1:.1f},{row + 12}" fill="{STRAGGLER_COLOR}"/>'
            f'<text class="legend" x="{x + 18:.1f}" y="{row + 10}">straggler (not a failure)</text>'
        )
        x += 30 + 6.3 * len("straggler (not a failure)")
    if not kinds:
        parts.append(f'<text class="legend" x="{x}" y="{row + 10}">none</text>')
        return parts + _injected_legend(frame, x + 40, row)
    for kind in kinds:
        parts.append(
            f'<circle class="mark" cx="{x + 7:.1f}" cy="{row + 6}" r="5.5" fill="{kind_color(kind)}"/>'
            f'<text class="legend" x="{x + 18:.1f}" y="{row + 10}">{escape(kind)}</text>'
        )
        x += 30 + 6.3 * len(kind)
    parts.append(
        f'<circle class="mark cause" cx="{x + 7:.1f}" cy="{row + 6}" r="6" fill="#fff"/>'
        f'<text class="legend" x="{x + 18:.1f}" y="{row + 10}">ringed: root cause of its attempt</text>'
    )
    return parts + _injected_legend(frame, x + 30 + 6.3 * len("ringed: root cause of its attempt"), row)


def _injected_legend(frame: _Frame, x: float, row: float) -> list[str]:
    """The legend's entry for the injected events' lines, when there are some."""
    if not frame.injected:
        return []
    return [
        f'<line class="injected-line" x1="{x + 7:.1f}" y1="{row}" x2="{x + 7:.1f}" y2="{row + 12}"/>'
        f'<text class="legend" x="{x + 18:.1f}" y="{row + 10}">injected from outside (--events)</text>'
    ]


def render_svg(timeline: Timeline, *, standalone: bool = True, injected: Sequence[InjectedMark] = ()) -> str:
    """The picture: one lane per node, phase bars, failure dots, axis, legend.

    ``standalone`` adds the XML declaration and a title (run id, outcome, goodput); ``injected``:
    events injected from outside (``elastic report --events``), each a dashed line across the lanes.
    """
    frame = _Frame(timeline, top=(92.0 if standalone else 30.0), injected=tuple(injected))
    height = frame.legend_top + 52
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>' if standalone else "",
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 {_W} {height:.0f}" '
        f'width="{_W}" height="{height:.0f}" role="img" aria-label="timeline of run {escape(timeline.run_id)}">',
        f"<style>{_SVG_STYLE}</style>",
        '<defs><pattern id="backoff-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#e5dbff"/>'
        f'<rect width="3" height="6" fill="{PHASE_COLORS["backoff"]}"/></pattern></defs>',
        f'<rect width="{_W}" height="{height:.0f}" fill="#fff"/>',
    ]
    if standalone:
        parts.append(f'<text class="title" x="24" y="32">run {escape(timeline.run_id)}</text>')
        parts.append(f'<text class="sub" x="24" y="54">{escape(_headline(timeline))}</text>')
    if not timeline.lanes:
        parts.append(f'<text class="sub" x="{_LEFT}" y="{frame.top + 30}">no attempt reached its nodes</text>')
    parts += _axis(frame) + _lanes(frame) + _attempt_lines(frame) + _markers(frame) + _injected(frame) + _legend(frame)
    parts.append("</svg>\n")
    return "\n".join(p for p in parts if p)
