"""In-place restarts (``--spares``): what the controller knows of the spares, and whether a
failure is repaired in place. Pure.

One part of the controller (:mod:`elastic.core.controller.controller`), built with its
:class:`ControllerState`. It keeps the spares at hand (started, as each node said, less those
ended or handed a place), which nodes run every rank on ``elastic.worker.inplace`` (a node
starts its spares only then), and the re-forming the driver is carrying out. The decision is
:func:`elastic.core.inplace.fallback.repair`'s; this part gives it what the run knows, journals
a re-forming (``world_reformed``) or why there is none (``inplace_fell_back``), and keeps the
full restart the policy decided, to fall back to if the nodes cannot hand a place.

The re-formed world is the *next attempt*: the controller closes the failed one as a drain would
and opens the next in ``launching`` (``reform``), so every per-attempt rule reads it as any other
(docs/design/in-place-restart.md). A re-formed world the controller lets grow or shrink is not
built: a loss with fewer spares than places falls back (the world keeps its size, so the result
stays bit-identical to a run with no failure).
"""

from __future__ import annotations

from dataclasses import dataclass

from elastic.core.controller.attempts import Attempt
from elastic.core.controller.drain import Draining
from elastic.core.controller.state import ControllerState
from elastic.core.events import EventName
from elastic.core.failures import FailureKind
from elastic.core.inplace.fallback import repair
from elastic.core.inplace.reform import FullRestart, Reform
from elastic.core.launch.spec import Role
from elastic.core.messages import HelperEnded, ReformWorld, SparesStarted

__all__ = ["InPlaceRepair", "PendingReform", "lost_while_reforming"]


@dataclass(frozen=True)
class PendingReform:
    """A re-forming decided and not yet carried out: of attempt ``attempt``, as ``reform`` says,
    and the drain for a full restart the policy decided (``fallback``) should the nodes fail it."""

    attempt: int
    reform: Reform
    fallback: Draining


class InPlaceRepair:
    """The spares at hand and the re-forming under way; off (``spares`` 0) it never repairs."""

    def __init__(self, state: ControllerState, *, spares: int) -> None:
        self._state = state
        self.enabled = spares > 0
        self._at_hand = 0  # spares started and not yet ended or handed a place
        self._in_place_nodes: set[str] = set()  # nodes whose ranks all run on elastic.worker.inplace
        self._store_lost: str | None = None  # why the store's host is gone (no re-forming without it)
        self.reforming: PendingReform | None = None

    def launched_anew(self) -> None:
        """A full launch: the spares and the store of the attempt before were stopped with it."""
        self._at_hand, self._in_place_nodes, self._store_lost = 0, set(), None
        self.reforming = None

    # -- what the nodes say --------------------------------------------------------------

    def on_spares_started(self, seen: SparesStarted) -> None:
        """A node's spares started (its ranks run in place), or could not: journaled and counted."""
        state = self._state
        current = state.current
        if current is None or seen.attempt != current.number or state.done:
            return
        fields: dict[str, object] = {"node": seen.node, "pids": list(seen.pids)}
        if seen.error is not None:
            fields["error"] = seen.error
        else:
            self._in_place_nodes.add(seen.node)
        self._at_hand += len(seen.pids)
        state.record(EventName.SPARES_STARTED, **fields)

    def on_helper_ended(self, seen: HelperEnded) -> None:
        """A spare or the store's host ended while its attempt ran: journaled (no rank's failure);
        a spare is no longer at hand, and without the store nothing re-forms."""
        state = self._state
        current = state.current
        if current is None or seen.attempt != current.number or state.done:
            return
        if seen.role == Role.SPARE.value:
            self._at_hand = max(0, self._at_hand - 1)
        elif seen.role == Role.STORE.value:
            self._store_lost = f"the in-place store's host (pid {seen.pid}) ended with {seen.returncode}"
        state.record(EventName.HELPER_ENDED, node=seen.node, role=seen.role, pid=seen.pid, exit_code=seen.returncode)

    # -- the decision --------------------------------------------------------------------

    def decide(self, current: Attempt) -> Reform | FullRestart | None:
        """After the policy decided to restart the current attempt: the world it re-forms into,
        or a full restart and why (:func:`elastic.core.inplace.fallback.repair`); None when
        in-place restarts are off. Nothing is journaled (:meth:`begin` does)."""
        if not self.enabled:
            return None
        if self._store_lost is not None:
            return FullRestart(self._store_lost)
        return repair(
            current.generation,
            current.world_size,
            _lost(current),
            opted_in=range(current.world_size) if self._all_in_place(current) else (),
            forming=current.generation > 0 and current.steps.first is None,
            spares=self._at_hand,
            min_world_size=current.world_size,  # a world that shrinks or grows is not built: see above
        )

    def begin(self, current: Attempt, decided: Reform | FullRestart, restart: Draining) -> bool:
        """Journal :meth:`decide`'s answer: a re-forming (``world_reformed``, and
        :class:`ReformWorld` commanded; True, ``restart`` kept to fall back to) or why not
        (``inplace_fell_back``; False: the caller drains for ``restart``)."""
        state = self._state
        if isinstance(decided, FullRestart):
            state.record(EventName.INPLACE_FELL_BACK, reason=decided.reason)
            return False
        self._at_hand -= len(decided.joiners)
        self.reforming = PendingReform(current.number, decided, restart)
        state.record(
            EventName.WORLD_REFORMED,
            generation=decided.generation,
            lost=sorted(_lost(current)),
            survivors=[list(pair) for pair in decided.survivors],
            joiners=list(decided.joiners),
            identical=decided.identical,
        )
        state.command(ReformWorld(current.number, decided))
        return True

    def fall_back(self, reason: str) -> Draining:
        """The re-forming under way cannot be carried out (``reason``): journaled; the drain of
        the full restart the policy decided, to begin now."""
        assert self.reforming is not None
        fallback = self.reforming.fallback
        self.reforming = None
        self._state.record(EventName.INPLACE_FELL_BACK, reason=reason)
        return fallback

    def reformed(self) -> Reform:
        """The re-forming under way was carried out: its world, and nothing is under way."""
        assert self.reforming is not None
        reform = self.reforming.reform
        self.reforming = None
        return reform

    def awaits(self, attempt: int) -> bool:
        """Whether a re-forming of ``attempt`` is decided and not yet carried out."""
        return self.reforming is not None and self.reforming.attempt == attempt

    def _all_in_place(self, current: Attempt) -> bool:
        """Every node of the attempt said its ranks run in place (its spares started)."""
        return current.nodes > 0 and len(self._in_place_nodes) >= current.nodes


def _lost(current: Attempt) -> dict[int, FailureKind]:
    """The attempt's lost ranks, each with its failure's kind (not those stopped with a peer's)."""
    return {f.rank: f.kind for f in current.failures if f.rank is not None and f.kind is not FailureKind.COLLATERAL}


def lost_while_reforming(end: str) -> str:
    """Why a rank's end (``end``, described) heard while a re-forming is under way ends it."""
    return f"{end} while the world was being re-formed in place"
