"""Drawing a :class:`~elastic.core.journal.timeline.Timeline`: a standalone SVG and a self-contained HTML page.

The picture itself is :mod:`elastic.views.timeline_svg`'s; this module lays out the page around it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from elastic.core.journal.injected import InjectedMark
from elastic.core.journal.ledger import CAUSE_WORDS
from elastic.core.journal.timeline import AttemptView, Timeline
from elastic.views.timeline_svg import (
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
.ledger {{ background: #fff; border-radius: 8px; padding: 10px 14px; box-shadow: 0 1px 2px #0000001a; }}
.ledger-row {{ display: flex; align-items: center; gap: 10px; margin: 6px 0; }}
.ledger-row .who {{ width: 90px; font-size: 13px; color: #495057; }}
.ledger-row .total {{ width: 70px; text-align: right; font-size: 13px; font-variant-numeric: tabular-nums; }}
.track {{ flex: 1; }}
.bar {{ display: flex; height: 18px; border-radius: 3px; overflow: hidden; background: #e9ecef; }}
.bar .seg {{ height: 100%; min-width: 1px; }}
.legend {{ display: flex; flex-wrap: wrap; gap: 4px 16px; font-size: 12px; color: #495057; margin-top: 8px; }}
.legend .kind {{ border-radius: 2px; }}
"""

# One colour per cause of the goodput ledger (elastic.core.journal.ledger.CAUSES).
LEDGER_COLORS = {
    "productive": "#2b8a3e",
    "slow_steps": "#8ce99a",
    "redone": "#e8590c",
    "checkpoint": "#74c0fc",
    "startup": "#fab005",
    "running_no_steps": "#b2f2bb",
    "launch": "#1c7ed6",
    "detection": "#c92a2a",
    "exit_wait": "#f783ac",
    "drain": "#9c36b5",
    "backoff": "#868e96",
    "waiting_for_nodes": "#0c8599",
    "other": "#ced4da",
}


def _attempt_row(timeline: Timeline, view: AttemptView) -> str:
    attempt = view.attempt
    cause = attempt.root_cause
    wall = timeline.started_at.timestamp() + view.start_s
    clock = datetime.fromtimestamp(wall, tz=timeline.started_at.tzinfo).strftime("%H:%M:%S.%f")[:-3]
    kind = (
        f'<span class="kind" style="background:{kind_color(cause.kind.value)}"></span>{escape(cause.kind.value)}'
        if cause else "—"
    )
    if cause is not None and cause.diagnosis is not None:
        kind += f' <span class="muted">{escape(cause.diagnosis.signature)}</span>'  # its failure signature
    step = "" if attempt.checkpoint_step is None else str(attempt.checkpoint_step)
    if attempt.resume_step is not None:
        step = f"{step or '—'} (from {attempt.resume_step})"
    cells = [
        f'<td class="num">{attempt.number}</td>',
        f"<td>{clock} <span class=\"muted\">+{format_s(view.start_s)}</span></td>",
        f'<td class="num">{format_s(view.ran_s)}'
        + (f' <span class="muted">after {format_s(attempt.waited_s)}</span>' if attempt.waited_s >= 0.05 else "")
        + "</td>",
        f'<td class="num">{"" if view.world_size is None else view.world_size}</td>',
        f"<td>{escape(attempt.phase_reached)}</td>",
        f"<td>{kind}</td>",
        f'<td class="num">{"" if cause is None or cause.rank is None else cause.rank}</td>',
        f"<td>{'' if cause is None or cause.node is None else escape(short_node(cause.node))}</td>",
        f"<td>{'' if cause is None else escape(cause.how)}</td>",
        f"<td>{escape(step) or '—'}</td>",
        f"<td>{'yes' if view.made_progress else 'no'}</td>",
    ]
    return f'<tr data-attempt="{attempt.number}">{"".join(cells)}</tr>'


def _root_cause_text(timeline: Timeline) -> str:
    cause = timeline.root_cause
    if cause is not None:
        text = escape(cause.describe())
        if cause.message:
            text += f'<br><code>{escape(cause.message)}</code>'
        if cause.diagnosis is not None:
            text += f'<br>signature: <code>{escape(cause.diagnosis.describe())}</code>'
        if timeline.reason:
            text += f'<br><span class="muted">{escape(timeline.reason)}</span>'
        return text
    failed = [a.attempt.root_cause for a in timeline.attempts if a.attempt.root_cause is not None]
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
    for excluded in timeline.excluded_nodes:
        notes.append(f"Node <code>{escape(short_node(str(excluded.get('node'))))}</code> was excluded after attempt "
                     f"{excluded.get('attempt')}: {escape(str(excluded.get('reason')))}.")
    for at_s in timeline.resumed_at_s:
        notes.append(f"A new driver resumed the run at +{at_s:.2f} s (red dotted line).")
    for attempt in timeline.attempts:
        for straggler in attempt.stragglers:  # an orange triangle on its node's lane
            notes.append(f"Attempt {attempt.number}, straggler at +{straggler.at_s:.2f} s: {escape(straggler.text)}.")
        notes.extend(f"Attempt {attempt.number}: {escape(note)}." for note in attempt.end_notes)
    return [f'<p class="note">{note}</p>' for note in notes]


_GOODPUT_DEFINITION = (
    "<b>Productive training</b> is the goodput ledger's (below): training from an attempt's "
    "first step, less the steps it trained again, over the run's wall time (from its start to "
    "its <code>run_finished</code>), the same figure as the summary's and "
    "<code>elastic status</code>'s. An attempt's <i>duration</i> is the time its ranks ran, "
    "from its launch; the wait before it (backoff, nodes) is shown after it. An attempt made "
    "<i>progress</i> when the checkpoint found after its workers stopped is newer than the one it "
    "resumed from; when the run records no checkpoints, only an attempt that ended the run "
    "successfully made progress."
)


# The bars' segments in the order they happen in an attempt.
_BAR_ORDER = ("waiting_for_nodes", "backoff", "launch", "startup", "running_no_steps", "redone",
              "productive", "slow_steps", "checkpoint", "exit_wait", "detection", "drain", "other")


def _ledger_bar(who: str, key: str, causes: tuple[tuple[str, float], ...], run_s: float) -> str:
    """One stacked bar, as wide as its share of the run: each cause a segment in proportion."""
    total = sum(s for _, s in causes)
    causes = tuple(sorted(causes, key=lambda cs: _BAR_ORDER.index(cs[0]) if cs[0] in _BAR_ORDER else 99))
    width = 100.0 * min(1.0, total / run_s) if run_s > 0 else 100.0
    segments = "".join(
        f'<div class="seg" data-cause="{escape(cause)}" style="flex-grow:{seconds:.6f};'
        f'background:{LEDGER_COLORS.get(cause, "#ced4da")}" '
        f'title="{escape(CAUSE_WORDS.get(cause, cause))}: {format_s(seconds)} ({seconds / total:.0%})"></div>'
        for cause, seconds in causes
        if seconds > 0
    ) if total > 0 else ""
    return (
        f'<div class="ledger-row" {key}><div class="who">{escape(who)}</div>'
        f'<div class="track"><div class="bar" style="width:{width:.3f}%">{segments}</div></div>'
        f'<div class="total">{format_s(total)}</div></div>'
    )


def _ledger_section(timeline: Timeline) -> str:
    """Where the time went: a stacked bar for the run and one per attempt, and the legend."""
    if not timeline.ledger:
        return ""
    run_s = sum(s for _, s in timeline.ledger)
    bars = [_ledger_bar("run", 'data-ledger="run"', timeline.ledger, run_s)]
    bars += [
        _ledger_bar(f"attempt {a.number}", f'data-ledger-attempt="{a.number}"', a.ledger, run_s)
        for a in timeline.attempts
        if a.ledger
    ]
    legend = "".join(
        f'<span><span class="kind" style="background:{LEDGER_COLORS.get(c, "#ced4da")}"></span>'
        f"{escape(CAUSE_WORDS.get(c, c))} {format_s(s)}</span>"
        for c, s in timeline.ledger
        if s > 0
    )
    return (
        '<h2>Where the time went</h2>\n<div class="ledger" id="ledger">\n'
        + "\n".join(bars)
        + f'\n<div class="legend">{legend}</div>\n</div>'
    )


_LEDGER_DEFINITION = (
    "<b>Where the time went</b> splits the wall time by cause (the goodput ledger, also in "
    "<code>report.json</code>): productive training from an attempt's first step, less the "
    "<i>redone</i> steps between the checkpoint it resumed from and the step an earlier attempt had "
    "reached; <i>start-up</i> from the ranks running to the first step (imports, compilation, "
    "checkpoint load); launch; detection (from the last progress to the drain); drain; backoff; "
    "waiting for nodes. Steps come from the ranks' output or <code>elastic.heartbeat(step=...)</code>; "
    "a run that shows none has its running time as <i>running (no step information)</i>."
)


def _productive_card(timeline: Timeline) -> str:
    """The ledger's productive training over the wall time: the summary's and status's figure."""
    share = timeline.productive_share
    if share is None:
        value, below = "unknown", "no attempt showed a training step: see where the time went"
    else:
        productive = dict(timeline.ledger).get("productive", 0.0)
        value, below = f"{share:.1%}", f"{format_s(productive)} of {format_s(timeline.duration_s)}"
    return (
        f'<div class="card" id="goodput"><div class="label">productive training</div>'
        f'<div class="value">{value}</div>\n<div class="muted">{below}</div></div>'
    )


def _injected_section(marks: Sequence[InjectedMark]) -> str:
    """The events injected from outside (``--events``): when, what, in which attempt, what followed."""
    if not marks:
        return ""
    rows = "\n".join(
        f'<tr data-injected="{number}" data-attempt="{"" if m.attempt is None else m.attempt}">'
        f'<td class="num">{m.at_s:+.2f} s</td><td>{escape(m.event.kind)}</td><td>{escape(m.event.target)}</td>'
        f"<td>{escape(m.event.cause)}</td><td>{escape(m.where)}</td>"
        f"<td>{escape(m.seen_text() or '—')}</td><td>{escape(m.recovery_text() or '—')}</td>"
        "</tr>"
        for number, m in enumerate(marks)
    )
    return (
        '<h2>Injected events</h2>\n<table id="injected">\n<thead><tr><th>time</th><th>kind</th><th>target</th>'
        "<th>cause</th><th>when</th><th>what elastic recorded next (failure, notice)</th>"
        "<th>next first training step</th></tr></thead>\n<tbody>\n" + rows + "\n</tbody>\n</table>"
    )


_INJECTED_DEFINITION = (
    "<b>Injected events</b> (<code>elastic report --events FILE</code>) are what a test or a failure "
    "schedule did to the run from outside, as its own log says: each is a dashed line across the "
    "lanes at its time, placed in the attempt that had begun, beside the first failure or "
    "preemption notice elastic recorded in that attempt from then on and the first training step "
    "of a later attempt."
)


def render_html(timeline: Timeline, *, injected: Sequence[InjectedMark] = ()) -> str:
    """A self-contained page: the picture, the figures, the attempts table, and the events
    injected from outside when there are some (``elastic report --events``). No scripts."""
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
{_productive_card(timeline)}
<div class="card wide" id="root-cause"><div class="label">root cause</div><div>{_root_cause_text(timeline)}</div></div>
</div>
{"".join(_notes(timeline))}
<figure>
{render_svg(timeline, standalone=False, injected=injected)}
</figure>
{_ledger_section(timeline)}
<h2>Attempts</h2>
<table id="attempts">
<thead><tr><th>#</th><th>start (UTC)</th><th>duration</th><th>world size</th><th>phase reached</th>
<th>failure kind</th><th>rank</th><th>node</th><th>exit code / signal</th><th>checkpoint step</th>
<th>progress ({progress})</th></tr></thead>
<tbody>
{rows}
</tbody>
</table>
{_injected_section(injected)}
<h2>How to read this</h2>
<p>One lane per node; bars show what the attempt running there was doing. Waits before an
attempt (pending, backoff) are drawn on the lanes of the nodes it then ran on. Dots mark
failed ranks, coloured by failure kind; a ringed dot is its attempt's root cause, small grey
dots are ranks that ended because of it (collateral). Hover over a bar or dot for details.</p>
<p>{_GOODPUT_DEFINITION}</p>
<p>{_LEDGER_DEFINITION}</p>
{f"<p>{_INJECTED_DEFINITION}</p>" if injected else ""}
</main>
</body>
</html>
"""
