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
(its main module had returned) counts neither: the work was done. Nor does a
handler that merely ran: a stop is a catch the exit follows closely, within
:data:`STOP_FOLLOWS_S` and with fewer than :data:`STEPS_AFTER_STOP` training
steps after it, counted from the first step report at or after the catch, and taken
as none when no report came after it (:func:`trained_after_stop`); a log reopened on SIGHUP hours
before a clean exit leaves it a success. And a run whose rank said it finished
(``elastic.heartbeat(done=True)``) finished, stop or not.

**Finished** (:class:`Finished`, judged by :func:`judge_finished` for a rank
killed as hung at exit, from what its node saw just before the kill,
:class:`HungRank`), the strongest first:

1. the rank said so: ``elastic.heartbeat(done=True)``;
2. its main thread was in interpreter finalization (at-exit handlers, module
   teardown, the wait for non-daemon threads: the stack dump taken before the
   kill shows it, :class:`elastic.core.training.stack_frames.HangFrame`), and its output
   does not end in an uncaught error;
3. its peers exited 0 after the last write in the checkpoint directory and the
   rank printed and beat nothing since, only for a rank whose stack could not be
   read as being at work: a stack that shows the rank at work in its script (an upload,
   a last evaluation; not a destructor or a collective on its way out) outweighs any
   quiet, and so does a newest checkpoint the driver rejected as not whole.

A rank whose script was ended by an uncaught exception and then hung on its way
out (:func:`elastic.core.evidence.ending_error`: the interpreter's own record, an
error file, or its output's final traceback, through torch's ``[rankN]:`` prefix
and at-exit noise) is never judged finished by 2 or 3. ``sys.exit(1)`` leaves no
such trace: a rank that hangs at exit after it is judged by its stack alone.
"""

from __future__ import annotations

import enum
import re
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from elastic.core.evidence import CaughtSignal, RankAccount
from elastic.core.labels import signal_number

__all__ = [
    "STEPS_AFTER_STOP",
    "STOP_FOLLOWS_S",
    "STOP_LINES",
    "FinishEvidence",
    "Finished",
    "HungRank",
    "StopSign",
    "judge_finished",
    "rerun_warning",
    "stop_sign_in",
    "stop_sign_in_lines",
    "trained_after_stop",
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
# A stop handler's catch is a stop only when the rank's exit follows it this closely: a preemptible
# cloud's notice (30 s to 2 min) and a save on it, or Slurm's `--signal=USR1@600`, fit in it many
# times; a handler that ran hours before the end (logrotate's SIGHUP) does not. Longer is the
# cheaper error: rerunning a finished job rather than calling a preempted one a success.
STOP_FOLLOWS_S = 600.0
# Steps trained after a catch that show the handler did not stop the rank: a handler that only
# sets a flag lets the step under way end (one), then the rank saves and leaves.
STEPS_AFTER_STOP = 2


def stop_sign_in(account: RankAccount) -> StopSign | None:
    """The stop that a rank's account (:class:`elastic.core.evidence.RankAccount`) shows, if any.

    JAX's preemption sync point reached is a stop. A stop handler that ran is one only when the
    exit followed it closely: it was not caught at interpreter exit (the work was done) and came
    within :data:`STOP_FOLLOWS_S` of the exit. Whether the rank trained on after it is
    :func:`trained_after_stop`'s to say, where its steps are known.
    """
    if account.preemption_sync is not None:
        step, _ = account.preemption_sync
        return StopSign(int(signal.SIGTERM), f"reached JAX's preemption sync point at step {step}")
    caught = _last_stop(account)
    if caught is None:
        return None
    by = f" in its handler {caught.handler}" if caught.handler else ""
    return StopSign(caught.signal, f"caught {caught.name}{by}")


def _last_stop(account: RankAccount) -> CaughtSignal | None:
    """The latest catch that can be a stop: not at interpreter exit, within the window."""
    for caught in reversed(account.caught):
        if not caught.at_exit and (caught.age_s is None or caught.age_s <= STOP_FOLLOWS_S):
            return caught
    return None


def trained_after_stop(account: RankAccount, steps_since: Callable[[float], int | None]) -> str | None:
    """Why the stop handler the account shows did not stop the rank, or None: the rank trained
    :data:`STEPS_AFTER_STOP` steps or more after the catch. ``steps_since(age_s)``: the steps it
    surely reached after a moment that long before its exit, counted from its first step report at
    or after that moment, never from one before it (which would count the steps trained between
    that report and the catch: five seconds of steps made a rank that stopped at once look as if
    it trained on, and its clean exit a success); None where no report came after the catch, and
    then the catch stands as a stop (the cheaper error: a finished job rerun, not a preempted one
    called a success). JAX's sync point is always a stop."""
    caught = None if account.preemption_sync is not None else _last_stop(account)
    if caught is None or caught.age_s is None:
        return None
    trained = steps_since(caught.age_s)
    if trained is None or trained < STEPS_AFTER_STOP:
        return None
    return f"it trained {trained} steps after it caught {caught.name} {caught.age_s:.0f} s before its exit"


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
    ``at_work``: its stack shows it at work in its script, not tearing down nor waiting in a
    collective (:func:`elastic.core.training.hang_blame.at_work`).
    """

    rank: int
    declared_done: bool = False
    at_exit: str | None = None
    frame: str | None = None
    silent_s: float | None = None
    checkpoint_s: float | None = None
    error: str | None = None
    at_work: bool = False


@dataclass(frozen=True)
class Finished:
    """A rank killed as hung at exit judged to have finished, by which evidence, in words."""

    rank: int
    evidence: FinishEvidence
    why: str


def judge_finished(
    seen: HungRank, *, peer_exited_s: float | None, incomplete_checkpoint: str | None = None
) -> Finished | None:
    """Whether a rank killed as hung at exit had finished its work, on the strongest evidence.

    ``peer_exited_s``: how long before the node looked the first peer exited 0;
    ``incomplete_checkpoint``: the newest checkpoint entry was rejected as not whole (then the
    last write proves nothing, and quiet is no evidence). None when nothing says it finished:
    it is then judged by ``--exit-hang``, as always.
    """
    if seen.declared_done:
        return Finished(seen.rank, FinishEvidence.DECLARED, "it said so (elastic.heartbeat(done=True))")
    if seen.error is not None:
        return None
    if seen.at_exit is not None:
        return Finished(
            seen.rank, FinishEvidence.AT_EXIT, f"its main thread was at interpreter exit ({seen.at_exit})"
        )
    if seen.at_work or incomplete_checkpoint is not None:
        return None  # its stack shows it at work in its script, or its last save was torn
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
