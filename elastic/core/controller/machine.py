"""The driver's phases and the legal moves between them, declared as data."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from transitions import EventData, Machine, MachineError

__all__ = [
    "TRANSITIONS",
    "IllegalTransition",
    "Phase",
    "PhaseMachine",
    "Transition",
    "Trigger",
    "mermaid_diagram",
]


class Phase(enum.Enum):
    PENDING = "pending"
    LAUNCHING = "launching"
    RUNNING = "running"
    DRAINING = "draining"
    DONE = "done"


class Trigger(enum.Enum):
    LAUNCH = "launch"
    LAUNCHED = "launched"
    ADOPT = "adopt"
    DRAIN = "drain"
    RELAUNCH = "relaunch"
    REFORM = "reform"
    FINISH = "finish"


@dataclass(frozen=True)
class Transition:
    trigger: Trigger
    source: Phase
    dest: Phase


TRANSITIONS: tuple[Transition, ...] = (
    Transition(Trigger.LAUNCH, Phase.PENDING, Phase.LAUNCHING),
    Transition(Trigger.LAUNCHED, Phase.LAUNCHING, Phase.RUNNING),
    # A dead driver's attempt taken over with its ranks running (elastic.core.takeover): no launch.
    Transition(Trigger.ADOPT, Phase.PENDING, Phase.RUNNING),
    Transition(Trigger.DRAIN, Phase.LAUNCHING, Phase.DRAINING),
    Transition(Trigger.DRAIN, Phase.RUNNING, Phase.DRAINING),
    # A stop that arrives while waiting to launch still goes through draining,
    # so teardown and the final bookkeeping live in one place.
    Transition(Trigger.DRAIN, Phase.PENDING, Phase.DRAINING),
    Transition(Trigger.RELAUNCH, Phase.DRAINING, Phase.PENDING),
    # A world re-formed in place (--spares): the survivors go on as the next attempt, which is
    # launched by handing the lost places to spares; never through draining, which stops ranks.
    Transition(Trigger.REFORM, Phase.RUNNING, Phase.LAUNCHING),
    Transition(Trigger.FINISH, Phase.DRAINING, Phase.DONE),
)

INITIAL_PHASE = Phase.PENDING
FINAL_PHASE = Phase.DONE


class IllegalTransition(RuntimeError):
    """A trigger fired in a phase that has no transition for it (a driver bug)."""


PhaseChangeListener = Callable[[Phase, Phase, Trigger], None]


class PhaseMachine:
    """A ``transitions`` machine over :class:`Phase`; callbacks only record.

    ``on_change(source, dest, trigger)`` is called after every transition and
    must not raise: ``transitions`` does not roll a state change back.
    """

    # Set on the model (this object) by ``transitions``.
    state: Phase
    trigger: Callable[..., bool]

    def __init__(self, on_change: PhaseChangeListener) -> None:
        self._on_change = on_change
        self._machine = Machine(
            model=self,
            states=Phase,
            transitions=[
                {"trigger": t.trigger.value, "source": t.source, "dest": t.dest}
                for t in TRANSITIONS
            ],
            initial=INITIAL_PHASE,
            auto_transitions=False,
            queued=True,
            send_event=True,
            after_state_change=self._record,
        )

    @property
    def phase(self) -> Phase:
        return self.state

    def fire(self, trigger: Trigger) -> None:
        try:
            self.trigger(trigger.value)
        except MachineError as error:
            raise IllegalTransition(
                f"trigger {trigger.value!r} is not allowed in phase {self.phase.value!r}"
            ) from error

    def _record(self, event: EventData) -> None:
        assert event.transition is not None and event.event is not None
        source = Phase[event.transition.source]
        dest = Phase[str(event.transition.dest)]
        self._on_change(source, dest, Trigger(event.event.name))


def mermaid_diagram(transitions: tuple[Transition, ...] = TRANSITIONS) -> str:
    """The transition table as a Mermaid state diagram (docs/failures/index.md embeds it)."""
    lines = ["stateDiagram-v2", f"    [*] --> {INITIAL_PHASE.value}"]
    lines += [f"    {t.source.value} --> {t.dest.value}: {t.trigger.value}" for t in transitions]
    lines.append(f"    {FINAL_PHASE.value} --> [*]")
    return "\n".join(lines) + "\n"
