"""Drawing a :class:`~elastic.core.timeline.Timeline`: a standalone SVG and a self-contained HTML page.

The picture itself is :mod:`elastic.run.timeline_svg`'s; this module lays out the page around it.
"""

from __future__ import annotations

from datetime import datetime

from elastic.core.timeline import AttemptView, Timeline
from elastic.run.timeline_svg import (
    FONT,
    KIND_COLORS,
    PHASE_COLORS,
    escape,
    format_s,
    kind_color,
    render_svg,
    short_node,
    tick_label,
    tick_step,
)

__all__ = [
    "KIND_COLORS",
    "PHASE_COLORS",
    "format_s",
    "render_html",
    "render_svg",
    "short_node",
    "tick_label",
    "tick_step",
]


# -- the page -----------------------------------------------------------------------------

_PAGE_STYLE = f"""
body {{ margin: 0; background: #f1f3f5; color: #212529; font: 14px/1.45 {FONT}; }}
main {{ max-width: 1240px; margin: 24px auto; padding: 0 20px; }}
h1 {{ font-size: 22px; margin: 0 0 4px; }}
h2 {{ font-size: 16px; margin: 28px 0 10px; }}
code {{ font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-size: 13px; }}
.muted {{ color: #495057; }}
.cards {{ display: flex; gap: 14px; margin: 18px 0; flex-wrap: wrap; }}
.card {{ background: #fff; border-radius: 8px; padding: 12px 16px; box-shadow: 0 1px 2px #0000001a; }}
.card .label {{ font-size: 12px; color: #495057; text-transform: uppercase; letter-spacing: .04em; }}
.card .value {{ font-size: 20px; font-weight: 600; }}
.card.wide {{ flex: 1; min-width: 320px; }}
.succeeded {{ color: #2b8a3e; }} .failed {{ color: #c92a2a; }} .stopped {{ color: #e67700; }}
.note {{ background: #fff3bf; border-left: 4px solid #f59f00; padding: 8px 12px; margin: 10px 0; }}
figure {{ margin: 0; background: #fff; border-radius: 8px; padding: 8px; box-shadow: 0 1px 2px #0000001a; overflow-x: auto; }}
figure svg {{ width: 100%; height: auto; display: block; }}
table {{ border-collapse: collapse; width: 100%; background: #fff; border-radius: 8px; overflow: hidden;
        box-shadow: 0 1px 2px #0000001a; }}
th, td {{ padding: 7px 10px; white-space: nowrap; text-align: left; border-bottom: 1px solid #e9ecef; font-variant-numeric: tabular-nums; }}
th {{ white-space: normal; background: #f8f9fa; font-size: 12px; color: #495057; text-transform: uppercase; letter-spacing: .03em; }}
td.num {{ text-align: right; }}
.kind {{ display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 5px; }}
"""


def _attempt_row(timeline: Timeline, attempt: AttemptView) -> str:
    cause = attempt.root_cause
    wall = timeline.started_at.timestamp() + attempt.start_s
    clock = datetime.fromtimestamp(wall, tz=timeline.started_at.tzinfo).strftime("%H:%M:%S.%f")[:-3]
    kind = (
        f'<span class="kind" style="background:{kind_color(cause.kind)}"></span>{escape(cause.kind)}'
        if cause else "—"
    )
    step = "" if attempt.checkpoint_step is None else str(attempt.checkpoint_step)
    if attempt.resume_step is not None:
        step = f"{step or '—'} (from {attempt.resume_step})"
    cells = [
        f'<td class="num">{attempt.number}</td>',
        f"<td>{clock} <span class=\"muted\">+{format_s(attempt.start_s)}</span></td>",
        f'<td class="num">{format_s(attempt.end_s - attempt.start_s)}</td>',
        f'<td class="num">{"" if attempt.world_size is None else attempt.world_size}</td>',
        f"<td>{escape(attempt.phase_reached)}</td>",
        f"<td>{kind}</td>",
        f'<td class="num">{"" if cause is None or cause.rank is None else cause.rank}</td>',
        f"<td>{'' if cause is None or cause.node is None else escape(short_node(cause.node))}</td>",
        f"<td>{'' if cause is None else escape(cause.how)}</td>",
        f"<td>{escape(step) or '—'}</td>",
        f"<td>{'yes' if attempt.made_progress else 'no'}</td>",
    ]
    return f'<tr data-attempt="{attempt.number}">{"".join(cells)}</tr>'


def _root_cause_text(timeline: Timeline) -> str:
    cause = timeline.root_cause
    if cause is not None:
        text = escape(cause.describe())
        if cause.message:
            text += f'<br><code>{escape(cause.message)}</code>'
        if timeline.reason:
            text += f'<br><span class="muted">{escape(timeline.reason)}</span>'
        return text
    failed = [a.root_cause for a in timeline.attempts if a.root_cause is not None]
    if timeline.outcome == "succeeded":
        return "none: the run succeeded" + (
            f" after {len(failed)} failed attempt{'s' if len(failed) != 1 else ''}" if failed else ""
        )
    if failed:
        return f"latest failure: {escape(failed[-1].describe())}"
    return escape(timeline.reason or "none recorded")


def _notes(timeline: Timeline) -> list[str]:
    notes = []
    if timeline.truncated_tail:
        notes.append(
            "The journal's last line was cut off (the driver died while writing it); "
            "the timeline ends at the last complete event."
        )
    if timeline.outcome is None:
        notes.append(
            "The journal has no <code>run_finished</code> event: the run is still going or its "
            "driver died. The timeline ends at the last event."
        )
    for at_s in timeline.resumed_at_s:
        notes.append(f"A new driver resumed the run at +{at_s:.2f} s (red dotted line).")
    return [f'<p class="note">{note}</p>' for note in notes]


_GOODPUT_DEFINITION = (
    "<b>Goodput</b> is the time spent in the <i>running</i> phase by attempts that made "
    "progress, divided by the run's wall time (first to last journal event). An attempt made "
    "progress when the checkpoint found after its workers stopped is newer than the one it "
    "resumed from; when the run records no checkpoints, only an attempt that ended the run "
    "successfully made progress. Launching, draining, waiting, backoff and the running time of "
    "attempts whose work was lost all count against it."
)


def render_html(timeline: Timeline) -> str:
    """A self-contained page: the picture, the figures, the attempts table. No scripts."""
    outcome = timeline.outcome or "not finished"
    status = "" if timeline.exit_status is None else f" (exit status {timeline.exit_status})"
    restarts = max(len(timeline.attempts) - 1, 0)
    progress = "newer checkpoint" if timeline.tracks_checkpoints else "ended in success"
    rows = "\n".join(_attempt_row(timeline, a) for a in timeline.attempts)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>elastic run {escape(timeline.run_id)}: timeline</title>
<style>{_PAGE_STYLE}</style>
</head>
<body>
<main>
<h1>Run <code>{escape(timeline.run_id)}</code></h1>
<div class="muted">started {escape(timeline.started_at.isoformat(sep=" ", timespec="milliseconds"))}</div>
<div class="cards">
<div class="card"><div class="label">outcome</div><div class="value {escape(outcome)}">{escape(outcome)}{escape(status)}</div></div>
<div class="card"><div class="label">wall time</div><div class="value">{format_s(timeline.duration_s)}</div></div>
<div class="card"><div class="label">attempts</div><div class="value">{len(timeline.attempts)}</div></div>
<div class="card"><div class="label">restarts</div><div class="value">{restarts}</div></div>
<div class="card" id="goodput"><div class="label">goodput</div><div class="value">{timeline.goodput:.1%}</div>
<div class="muted">{format_s(timeline.productive_s)} productive of {format_s(timeline.duration_s)}</div></div>
<div class="card wide" id="root-cause"><div class="label">root cause</div><div>{_root_cause_text(timeline)}</div></div>
</div>
{"".join(_notes(timeline))}
<figure>
{render_svg(timeline, standalone=False)}
</figure>
<h2>Attempts</h2>
<table id="attempts">
<thead><tr><th>#</th><th>start (UTC)</th><th>duration</th><th>world size</th><th>phase reached</th>
<th>failure kind</th><th>rank</th><th>node</th><th>exit code / signal</th><th>checkpoint step</th>
<th>progress ({progress})</th></tr></thead>
<tbody>
{rows}
</tbody>
</table>
<h2>How to read this</h2>
<p>One lane per node; bars show what the attempt running there was doing. Waits before an
attempt (pending, backoff) are drawn on the lanes of the nodes it then ran on. Dots mark
failed ranks, coloured by failure kind; a ringed dot is its attempt's root cause, small grey
dots are ranks that ended because of it (collateral). Hover over a bar or dot for details.</p>
<p>{_GOODPUT_DEFINITION}</p>
</main>
</body>
</html>
"""
