"""When a rank is hung in its distributed initialisation (``--init-timeout``). Pure.

A rank that entered ``init_process_group`` or ``jax.distributed.initialize`` (the rank
bootstrap's ``init_begin`` start-up mark) and has not returned (``init_end``) within its
window is hung: a peer that stopped there (rank 0 hosting the TCPStore, say) leaves every
other rank blocked in it too, often past torch's own timeout, and no heartbeat or step was
ever shown to call it hung otherwise. The window (:func:`init_window_s`):

- ``--init-timeout SECONDS``: that;
- ``--init-timeout auto``: :data:`FIRST_INIT_S` (torch's NCCL default) while no rank of the run
  has completed an initialisation; once one has (in an earlier attempt, or a peer of this one),
  the longer of :data:`FLOOR_S` and :data:`FACTOR` times the longest completed one, so a big job
  whose initialisation takes minutes is never killed for it;
- ``--init-timeout none``: never.

The node reads the marks (:mod:`elastic.node.watchers.init_hangs`) and hands them here as
:class:`RankInit` values, with the completed initialisations it saw earlier in the run and the
longest the run's journal holds (:func:`longest_init_s`: the controller carries it from attempt to
attempt in each :class:`elastic.core.messages.PlanAttempt`, and a driver that takes a run over reads
it from the dead driver's ``startup_profiled`` records), so a requeued run keeps its short window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "FACTOR",
    "FIRST_INIT_S",
    "FLOOR_S",
    "InitHang",
    "InitTimeout",
    "RankInit",
    "hung_in_init",
    "init_window_s",
    "longest_init_s",
]

FIRST_INIT_S = 600.0  # no completed initialisation seen yet: torch's NCCL default timeout
FLOOR_S = 60.0  # the shortest window of ``auto`` once an initialisation was seen
FACTOR = 10.0  # ``auto``: this many times the longest completed initialisation


@dataclass(frozen=True)
class InitTimeout:
    """``--init-timeout``: a fixed window (``seconds``), ``auto``, or neither (``none``)."""

    seconds: float | None = None
    auto: bool = True

    @property
    def active(self) -> bool:
        """Whether a rank is ever called hung in its initialisation."""
        return self.auto or self.seconds is not None

    def words(self) -> str:
        """The flag's value as typed: ``auto``, ``none``, or the seconds."""
        if self.seconds is not None:
            return f"{self.seconds:g}"
        return "auto" if self.auto else "none"


@dataclass(frozen=True)
class RankInit:
    """One rank's distributed initialisation as its marks show it (wall clock of its node)."""

    rank: int
    began_at: float
    ended_at: float | None = None  # None: not returned yet

    @property
    def seconds(self) -> float | None:
        """How long it took, once it returned."""
        return None if self.ended_at is None else max(0.0, self.ended_at - self.began_at)


@dataclass(frozen=True)
class InitHang:
    """A rank found hung in its initialisation: how long it has been in it, and why in words."""

    rank: int
    waited_s: float
    window_s: float
    reason: str


def init_window_s(policy: InitTimeout, completed_s: Iterable[float]) -> float | None:
    """The seconds a rank may spend in its initialisation, given the ``completed_s`` ones of the
    run (earlier attempts' and this attempt's peers'); None: no limit."""
    if policy.seconds is not None:
        return policy.seconds
    if not policy.auto:
        return None
    longest = max(completed_s, default=None)
    if longest is None:
        return FIRST_INIT_S
    return max(FLOOR_S, FACTOR * longest)


def hung_in_init(
    policy: InitTimeout, ranks: Sequence[RankInit], earlier_s: Iterable[float], now: float
) -> list[InitHang]:
    """The ``ranks`` (each a rank that began its initialisation) hung in it at ``now`` (the wall
    clock their marks are on); ``earlier_s``: the initialisations the run completed in earlier
    attempts. A peer of this attempt that completed its own counts too."""
    window_s = init_window_s(policy, [*earlier_s, *(s for r in ranks if (s := r.seconds) is not None)])
    if window_s is None:
        return []
    how = policy.words() if policy.seconds is not None else f"auto allows {window_s:g} s"
    return [
        InitHang(r.rank, now - r.began_at, window_s,
                 f"hung in distributed initialisation for {now - r.began_at:.0f} s (--init-timeout {how})")
        for r in ranks
        if r.ended_at is None and now - r.began_at >= window_s
    ]


def longest_init_s(profiles: Iterable[Mapping[str, Mapping[str, float]] | None], longest: float | None = None) -> float | None:
    """The longest distributed initialisation in start-up profiles (each a rank's phases by rank:
    ``startup_profiled``'s ``by_rank``, or an attempt's own), or ``longest`` if none is longer: what
    the run completed, for ``auto``'s window in its later attempts, under this driver or the next."""
    for by_rank in profiles:
        for phases in (by_rank or {}).values():
            seconds = phases.get("distributed_init") if isinstance(phases, Mapping) else None
            if isinstance(seconds, (int, float)) and (longest is None or seconds > longest):
                longest = float(seconds)
    return longest
