"""Which rank a hang is blamed on: a rank waiting in a collective is a victim, the peer it waits
for is the cause. Pure.

A stall is seen on the rank whose progress is watched (in DDP, the usual habit has only rank 0
print its steps), but when one rank is stuck in its own code, every other rank blocks in its
next collective (``c10d::Work::wait``, an all-reduce, a barrier): the rank that stopped
printing is the one that waits. Blaming it names a victim as the root cause. The stacks the node
dumps before it kills (:mod:`elastic.core.training.stack_frames`) are the evidence:

- every stalled rank waits in a collective and another rank of the node does not (it is in its
  own code, or in a library that is no collective): that rank is the cause, and it is the one
  killed as hung, its reason naming what the others waited in;
- the stalled ranks wait in a collective and no rank of the node is elsewhere: the rank they wait
  for is on another node, or its stack could not be read; they are killed (the run must go on),
  and their reason says the cause is not known, never that they were it;
- a stalled rank in its own code, or whose stack could not be read (a stopped process), is the
  cause itself, and the stalled ranks that wait in a collective beside it are its victims, not
  killed (with in-place restarts they survive it); with no stack at all, the reason says whether
  it waited for another rank is not known.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from elastic.core.labels import rank_list
from elastic.core.training.stack_frames import HangFrame

__all__ = ["Blame", "at_work", "blame_hang", "waits_in_collective"]

# What a frame waiting in a collective names: torch's c10d (Work::wait, the Reducer, the process
# groups), gloo and NCCL, the Python API's collectives, JAX's distributed runtime.
_COLLECTIVE = re.compile(
    r"c10d::|gloo::|nccl|ProcessGroup|Reducer::|torch/distributed/|distributed_c10d|jax/_src/distributed"
    r"|multihost_utils|\b(?:all_reduce|allreduce|all_gather|allgather|reduce_scatter|broadcast|barrier)\b",
    re.IGNORECASE,
)


def waits_in_collective(hang: HangFrame) -> bool:
    """Whether a rank's main thread waits in a collective (its frame, the wait inside it, or the
    Python frame that called it)."""
    return any(frame is not None and _COLLECTIVE.search(f"{frame.name} {frame.where}")
               for frame in (hang.frame, hang.waiting_in, hang.called_from))


# What a frame tearing the program down names: a C++ destructor, a finalizer, a process group's
# destruction, the interpreter's shutdown.
_TEARDOWN = re.compile(r"~|__del__|destroy_process_group|\b_shutdown\b|atexit|finaliz", re.IGNORECASE)


def at_work(hang: HangFrame) -> bool:
    """Whether a rank's stack shows it at work in its script: not at interpreter exit, not waiting
    in a collective, not in a destructor or teardown (``~ProcessGroupGloo`` under the script's last
    line is its way out, not work)."""
    if hang.at_exit is not None or hang.frame is None or waits_in_collective(hang):
        return False
    return not any(frame is not None and _TEARDOWN.search(frame.name)
                   for frame in (hang.frame, hang.waiting_in, hang.handler))


@dataclass(frozen=True)
class Blame:
    """The ranks a hang's kill is for, each with what its reason adds (after the stall's own)."""

    culprits: tuple[int, ...]
    reasons: Mapping[int, str]
    victims: tuple[int, ...] = ()


def blame_hang(stalled: Sequence[int], frames: Mapping[int, HangFrame | None]) -> Blame:
    """Blame the hang the ``stalled`` ranks show on the ranks that cause it, from the node's
    ranks' ``frames`` (a rank missing or None: its stack could not be read; empty: no stacks)."""
    if not frames:
        return Blame(tuple(stalled), {r: "whether it waited for another rank is not known (no stack)" for r in stalled})
    waiting = [r for r in stalled if (hang := frames.get(r)) is not None and waits_in_collective(hang)]
    if len(waiting) < len(stalled):
        # A stalled rank not in a collective (in its own code, or stopped: its stack unreadable) is
        # the cause itself; the stalled ranks waiting in one wait for it, victims (a peer that
        # survives in place is not killed with it).
        return Blame(tuple(r for r in stalled if r not in waiting), {}, tuple(waiting))
    where = frames[waiting[0]]
    assert where is not None
    waited_in = where.frame or where.waiting_in
    culprits = tuple(
        rank for rank, hang in sorted(frames.items())
        if rank not in stalled and hang is not None and hang.at_exit is None and not waits_in_collective(hang)
    )
    if culprits:
        reasons = {
            rank: (f"{rank_list(waiting)} waited for it in a collective ({waited_in}) while its main thread "
                   f"{frames[rank].describe()}")  # type: ignore[union-attr]
            for rank in culprits
        }
        return Blame(culprits, reasons, tuple(waiting))
    return Blame(tuple(stalled), {
        rank: (f"it waited in a collective ({waited_in}): a victim; the rank it waited for is not known "
               "(on another node, or its stack could not be read)")
        for rank in stalled
    })
