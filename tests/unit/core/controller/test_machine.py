"""The phase machine: the table is the behaviour, and the docs show the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from elastic.core.controller.machine import (
    TRANSITIONS,
    IllegalTransition,
    Phase,
    PhaseMachine,
    Trigger,
    mermaid_diagram,
)

PAGE = Path(__file__).resolve().parents[4] / "docs" / "failures" / "index.md"


def machine_at(path: list[Trigger]) -> tuple[PhaseMachine, list[tuple[Phase, Phase, Trigger]]]:
    changes: list[tuple[Phase, Phase, Trigger]] = []
    machine = PhaseMachine(lambda s, d, t: changes.append((s, d, t)))
    for trigger in path:
        machine.fire(trigger)
    return machine, changes


# How to reach each phase from the start.
PATHS = {
    Phase.PENDING: [],
    Phase.LAUNCHING: [Trigger.LAUNCH],
    Phase.RUNNING: [Trigger.LAUNCH, Trigger.LAUNCHED],
    Phase.DRAINING: [Trigger.LAUNCH, Trigger.LAUNCHED, Trigger.DRAIN],
    Phase.DONE: [Trigger.LAUNCH, Trigger.LAUNCHED, Trigger.DRAIN, Trigger.FINISH],
}


@pytest.mark.parametrize("transition", TRANSITIONS, ids=lambda t: f"{t.source.value}-{t.trigger.value}")
def test_every_table_row_is_a_legal_move(transition) -> None:  # type: ignore[no-untyped-def]
    """Firing a row's trigger in its source phase lands in its destination."""
    machine, changes = machine_at(PATHS[transition.source])
    machine.fire(transition.trigger)
    assert transition.dest == machine.phase
    assert (transition.source, transition.dest, transition.trigger) == changes[-1]


ILLEGAL = [
    (phase, trigger)
    for phase in Phase
    for trigger in Trigger
    if not any(t.source is phase and t.trigger is trigger for t in TRANSITIONS)
]


@pytest.mark.parametrize(("phase", "trigger"), ILLEGAL, ids=lambda v: v.value)
def test_triggers_missing_from_the_table_raise(phase: Phase, trigger: Trigger) -> None:
    """Anything the table does not allow raises instead of moving."""
    machine, _ = machine_at(PATHS[phase])
    with pytest.raises(IllegalTransition):
        machine.fire(trigger)
    assert phase == machine.phase


def test_done_is_terminal() -> None:
    """No transition leaves done."""
    assert not [t for t in TRANSITIONS if t.source is Phase.DONE]


def test_the_docs_diagram_matches_the_table() -> None:
    """The Mermaid block of docs/failures/index.md (How a run goes) is exactly what the table generates."""
    blocks = re.findall(r"```mermaid\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert mermaid_diagram() in blocks
