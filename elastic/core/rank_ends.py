"""What a rank's end means: finished, stopped from outside, or neither; read from evidence. Pure.

An exit status says less than it seems. A rank that exits 0 may have been
*stopped*: a preemption signal reached it from outside the launcher (a spot
notice delivered to the node's processes, Slurm signalling a job step, an
operator), and the framework saved and left in good order (JAX's preemption
sync point, which MaxText and Orbax act on; a SIGTERM handler that saves and
exits). And a rank that is still running, killed as hung at exit, may have
*finished*: its work was done and only its interpreter's way out hung. Each
end is judged on evidence that the rank's node gathers when it ends; without
evidence an end means what its status says, as it always did.

**Stopped** (:class:`StopSign`, carried on the exit as ``stopped_by``), the
strongest first:

1. *A hook in the rank's interpreter.* The rank bootstrap (``--rank-bootstrap``,
   on by default; ``elastic/worker/bootstrap/``) is in every Python rank without
   a code change. It wraps the handlers a rank installs with ``signal.signal``
   for SIGTERM, SIGINT, SIGHUP and SIGUSR1, so that one that runs writes the
   signal first, and JAX's ``reached_preemption_sync_point`` (through which
   Orbax and MaxText learn of a preemption: JAX's own SIGTERM handler is C++,
   out of Python's sight), so that a true answer is written; both to the rank's
   ``ELASTIC_SIGNALS_FILE`` (:func:`stop_sign_in`). This is the only evidence
   that says what the rank itself saw, whatever it prints, and costs nothing
   until a handler is installed.
2. *The rank's own last lines* (:data:`STOP_LINES`): a short table of lines
   that frameworks print when they stop on a signal, for ranks the bootstrap
   does not reach (``--rank-bootstrap off``, ``python -I``, another language).
   Lines can be reworded by any release, so the table stays small; the
   failure-signature matcher is where a longer one would live.

Not chosen: JAX's C++ log line of the notice (``Received preemption notice``)
comes before the sync point and also when nothing stops; the platform's own
notice on the node (a cloud's metadata server, Kubernetes' pod deletion) differs
by platform and comes to the node, not to a rank, and where it exists it
should come to the launcher as a notice (SIGUSR1, a Ray drain), which already
relaunches.

A signal the launcher sent never counts: it sends one only to drain an attempt
(a failure, a stop, a notice), and once the attempt drains a rank's exit 0 is
only an exit 0. A signal caught while the interpreter was already exiting
(its main module had returned) counts neither: the work was done. And a run
whose rank said it finished (``elastic.heartbeat(done=True)``) finished, stop
or not.

**Finished** (:class:`Finished`, judged by :func:`judge_finished` for a rank
killed as hung at exit, from what its node saw just before the kill,
:class:`HungRank`), the strongest first:

1. the rank said so: ``elastic.heartbeat(done=True)``;
2. its main thread was in interpreter finalization (at-exit handlers, module
   teardown, the wait for non-daemon threads: the stack dump taken before the
   kill shows it, :class:`elastic.core.training.stack_frames.HangFrame`), and its output
   does not end in an uncaught error;
3. its peers exited 0 after the last write in the checkpoint directory and the
   rank printed and beat nothing since (for a rank whose stack could not be
   read), and its output does not end in an uncaught error.

A rank that exited on an uncaught exception and then hung on its way out
(an error file, or a traceback as its last lines) is never judged finished by
2 or 3. ``sys.exit(1)`` leaves no such trace: a rank that hangs at exit after
it is judged by its stack alone.
"""

from __future__ import annotations

from elastic.core.labels import signal_number
import enum
import json
import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "STOP_LINES",
    "FinishEvidence",
    "Finished",
    "HungRank",
    "StopSign",
    "judge_finished",
    "rerun_warning",
    "stop_sign_in",
    "stop_sign_in_lines",
    "uncaught_error",
]

# -- stopped ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StopSign:
    """What stopped a rank that exited 0: the signal behind it and how the rank showed it, in
    words that follow "exited 0 after it": ``caught SIGTERM in its handler save (train.py:12)``."""

    signal: int
    how: str


# Lines that frameworks print as they stop on a signal: whose, and the pattern (its group
# ``signal`` names the signal; SIGTERM, JAX's preemption signal, where it has none).
# MaxText: after JAX's preemption sync point, with or without enable_autocheckpoint.
# Orbax: CheckpointManager.reached_preemption(step) was true.
STOP_LINES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("MaxText", re.compile(r"Training stopped: Job received termination signal \((?P<signal>SIG[A-Z0-9]+)\)")),
    ("Orbax", re.compile(r"Reached preemption sync point, step=\d+")),
)
_MAX_LINE_SHOWN = 160


def stop_sign_in(text: str) -> StopSign | None:
    """The first stop the rank bootstrap wrote to a rank's signals file (its text), if any.

    One JSON object a line: ``{"signal": 15, "name": "SIGTERM", "handler": "save (train.py:12)",
    "at_exit": false, ...}`` for a handler that ran, ``{"preemption_sync": 194, ...}`` for JAX's
    sync point reached. A signal caught at interpreter exit is no stop; a line that is not such
    an object (a torn write) is passed over.
    """
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        step = entry.get("preemption_sync")
        if isinstance(step, int) and not isinstance(step, bool):
            return StopSign(int(signal.SIGTERM), f"reached JAX's preemption sync point at step {step}")
        number = entry.get("signal")
        if not isinstance(number, int) or isinstance(number, bool) or entry.get("at_exit") is not False:
            continue
        name = str(entry.get("name") or f"SIG{number}")
        handler = entry.get("handler")
        by = f" in its handler {handler}" if isinstance(handler, str) and handler else ""
        return StopSign(number, f"caught {name}{by}")
    return None


def stop_sign_in_lines(lines: Sequence[str]) -> StopSign | None:
    """A stop on a signal that a rank's last lines say it made (:data:`STOP_LINES`), if any."""
    for line in reversed(lines):
        for framework, pattern in STOP_LINES:
            match = pattern.search(line)
            if match is None:
                continue
            named = match.groupdict().get("signal") or "SIGTERM"
            text = match.group(0)
            shown = text if len(text) <= _MAX_LINE_SHOWN else text[: _MAX_LINE_SHOWN - 1] + "…"
            return StopSign(_stop_signal_number(named), f"printed {framework}'s {shown!r}")
    return None


# -- finished --------------------------------------------------------------------------


class FinishEvidence(enum.Enum):
    """Why a rank killed as hung at exit is taken to have finished its work, strongest first."""

    DECLARED = "declared"  # elastic.heartbeat(done=True)
    AT_EXIT = "at_exit"  # its main thread was in interpreter finalization
    QUIET = "quiet"  # its peers exited 0 after the last checkpoint write, and it was silent since


@dataclass(frozen=True)
class HungRank:
    """What a node saw of a rank it was about to kill as hung at exit (before the stack dump).

    ``declared_done``: its heartbeat file said ``done``. ``at_exit`` and ``frame``: from its
    stack dump, why its interpreter is judged to be exiting (None: it is not, or there was no
    dump) and where its main thread is, in words (``HangFrame.describe()``). ``silent_s``:
    seconds since its last output or heartbeat (or its start). ``checkpoint_s``: seconds since
    the last write in the checkpoint directory (None: no directory, or nothing in it).
    ``error``: the uncaught error its output ends in, or its error file's (None: none).
    """

    rank: int
    declared_done: bool = False
    at_exit: str | None = None
    frame: str | None = None
    silent_s: float | None = None
    checkpoint_s: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class Finished:
    """A rank killed as hung at exit judged to have finished, by which evidence, in words."""

    rank: int
    evidence: FinishEvidence
    why: str


def judge_finished(seen: HungRank, *, peer_exited_s: float | None) -> Finished | None:
    """Whether a rank killed as hung at exit had finished its work, on the strongest evidence.

    ``peer_exited_s``: how long before the node looked the first peer exited 0. None when
    nothing says it finished: it is then judged by ``--exit-hang``, as always.
    """
    if seen.declared_done:
        return Finished(seen.rank, FinishEvidence.DECLARED, "it said so (elastic.heartbeat(done=True))")
    if seen.error is not None:
        return None
    if seen.at_exit is not None:
        return Finished(
            seen.rank, FinishEvidence.AT_EXIT, f"its main thread was at interpreter exit ({seen.at_exit})"
        )
    if (
        peer_exited_s is not None
        and seen.checkpoint_s is not None
        and seen.silent_s is not None
        and seen.checkpoint_s >= peer_exited_s
        and seen.silent_s >= seen.checkpoint_s
    ):
        return Finished(
            seen.rank, FinishEvidence.QUIET,
            f"its peers exited 0 after the last checkpoint write ({seen.checkpoint_s:.1f} s before) "
            f"and it printed nothing since ({seen.silent_s:.1f} s)",
        )
    return None


# The last lines of an uncaught Python exception: the traceback's head, then frames
# (indented), chained exceptions' joining lines, and the exception's own line(s).
_TRACEBACK_HEAD = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning|Failure)\b.*")


def uncaught_error(lines: Sequence[str]) -> str | None:
    """The exception a rank's output ends in, when its last lines are a Python traceback
    (what the interpreter prints for an uncaught exception); None otherwise."""
    text = [line.rstrip() for line in lines if line.strip()]
    if not text or not _EXCEPTION_LINE.match(text[-1]):
        return None
    for line in reversed(text[:-1]):
        if line.startswith(_TRACEBACK_HEAD) or line.endswith(_TRACEBACK_HEAD):
            return text[-1][:_MAX_LINE_SHOWN]
    return None


def rerun_warning(attempt: int, checkpoint_step: int | None, last_step: int | None) -> str | None:
    """The warning for an attempt about to be restarted whose latest complete checkpoint
    (``checkpoint_step``, found as its drain ended) holds the last step it reached: if that
    was the job's end, the next attempt may train it again (a Trainer resumed at its
    ``max_steps`` trains one step more and overwrites the final model). None where the
    steps say otherwise or are not known."""
    if checkpoint_step is None or last_step is None or checkpoint_step < last_step:
        return None
    return (
        f"restarted from checkpoint step {checkpoint_step}, which holds the last step attempt "
        f"{attempt} reached ({last_step}): if the job had finished, it may be trained again"
    )


def _stop_signal_number(name: str) -> int:
    """A stop sign's signal by its name; SIGTERM for one not known here."""
    return signal_number(name) or int(signal.SIGTERM)
