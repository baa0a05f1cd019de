"""Failure kinds, worker exit records, classify() and root_cause(): pure values only.

Ranks that outlived their grace are part of their exit record: how each held the stop
signal when it was SIGKILLed (:class:`GraceKill`). The node agent reads it from ``/proc`` at the moment of the kill (never guessed from
the exit status, which says only SIGKILL) and hands it on with the rank's exit; the
controller journals it with the drain's end, and the summary, ``report.json`` and
``elastic status`` say it in words: ``rank 0 ignored SIGTERM (JAX's preemption service
catches it); killed after 5 s``.

After a failure the survivors are collateral, and one that will not exit on the stop
signal is killed at once, not after ``--failure-grace``, unless a checkpoint write is
under way on its node (:class:`CheckpointWrite`, :class:`Collateral`); one whose own
handler caught the signal keeps the whole grace for its exit (:func:`exits_in_handler`).
The rule is here, the node reads the facts (``elastic/node/probes/checkpoint_writes.py``,
``elastic/node/probes/signal_state.py``) and acts.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from elastic.core.evidence import EndingError, RankAccount, ending_error
from elastic.core.labels import node_label, rank_list, signal_name, signal_number
from elastic.core.rank_ends import StopSign

if TYPE_CHECKING:
    from elastic.core.diagnosis.signatures import Diagnosis

__all__ = [
    "CRASH_SIGNALS", "GRACE_KILLS_LISTED", "RECENT_WRITE_S", "TERMINATION_SIGNALS", "Cause",
    "CheckpointWrite", "Collateral", "Disposition", "Failure", "FailureKind", "GraceKill", "WorkerExit",
    "can_be_root_cause", "classify", "decode_returncode", "describe_exit_hung", "describe_grace_kills",
    "exits_in_handler", "grace_kill_from", "never_exits_on", "root_cause", "to_failure",
]

# Grace kills of one attempt journaled one by one; past these only their count (a JAX job
# of 1,000 nodes has 7,999 survivors that never exit on SIGTERM).
GRACE_KILLS_LISTED = 16


class Disposition(enum.Enum):
    """What the rank's process had done with the stop signal (``/proc/PID/status``)."""

    IGNORED = "ignored"  # SIG_IGN: the signal never reached it (SigIgn)
    CAUGHT = "caught"  # a handler ran, and the rank did not exit in time (SigCgt)
    BLOCKED = "blocked"  # masked: still pending (SigBlk)
    DEFAULT = "default"  # the default action, yet alive (uninterruptible sleep, stopped)
    UNKNOWN = "unknown"  # its /proc could not be read


# A checkpoint directory written this recently counts as a write under way, though no rank
# holds a file in it open for writing: a saver between two files (HF's model, then its
# optimizer; Orbax's arrays, then their metadata) closes one and opens the next within
# milliseconds, and a writer the node cannot see (another node's rank on shared storage, an
# uploader in a session of its own) shows only there. One second covers those gaps many
# times over. Such a write is looked at again once it is this old (CheckpointWrite.quiet_in_s):
# a save that had just ended (a failure a few steps after it) then costs the survivors at
# most this long, not the whole grace; one that goes on gets the grace. Not seen: a save
# that computes longer than this between two files with none open (safetensors turns a
# whole shard into bytes before it opens the file: about a second per few GB).
RECENT_WRITE_S = 1.0


class Collateral(enum.Enum):
    """How a failure's drain treated a survivor that had not exited on the stop signal."""

    AT_ONCE = "at_once"  # no checkpoint write under way on its node: SIGKILLed as soon as that was clear
    WRITING = "writing"  # a checkpoint write under way on its node: the whole --failure-grace to finish it
    UNSEEN = "unseen"  # no checkpoint directory to look in: the whole grace, as no write could be seen
    HANDLER = "handler"  # its own handler caught the signal: the whole grace to run its exit (exits_in_handler)


@dataclass(frozen=True)
class CheckpointWrite:
    """What a node saw of checkpoint writes when it stopped a failure's survivors.

    ``directory``: its ranks have a checkpoint directory (``--checkpoint-dir``) to look
    in; ``written_s``: seconds since the latest write under it (None: nothing read);
    ``open_for_write``: a process of a rank still running holds a file under it open for
    writing.
    """

    directory: bool
    written_s: float | None = None
    open_for_write: bool = False

    @property
    def quiet_in_s(self) -> float | None:
        """A write under way by its time alone (no file open): seconds until it counts as over.

        Such a write is a save that just ended, or one between two of its files; a look
        this much later tells them apart (a write seen then is a new one). None: the
        verdict needs no second look.
        """
        if not self.directory or self.open_for_write or self.written_s is None:
            return None
        left_s = RECENT_WRITE_S - self.written_s
        return left_s if left_s > 0 else None

    @property
    def collateral(self) -> Collateral:
        """Whether the survivors may be killed at once: only when a write could be seen and none was."""
        if not self.directory:
            return Collateral.UNSEEN
        if self.open_for_write or (self.written_s is not None and self.written_s < RECENT_WRITE_S):
            return Collateral.WRITING
        return Collateral.AT_ONCE

    def describe(self) -> str:
        """``a checkpoint write was under way (a file in the checkpoint directory open for writing)``."""
        collateral = self.collateral
        if collateral is Collateral.UNSEEN:
            return "no --checkpoint-dir to see a checkpoint write in"
        if collateral is Collateral.AT_ONCE:
            return "no checkpoint write was under way"
        if self.open_for_write:
            return "a checkpoint write was under way (a file in the checkpoint directory open for writing)"
        return f"a checkpoint write was under way (the checkpoint directory written {self.written_s:.2g} s before)"


def never_exits_on(
    signum: int, disposition: Disposition, jax: bool, own_handler: bool = False, handler_ran: bool = False
) -> bool:
    """Whether a rank alive just after ``signum`` clearly will not exit on it: it ignores it, or
    JAX's preemption service catches it (SIGTERM only, what preemptible clouds send; the rank
    then waits for a sync point its broken group never reaches).

    ``own_handler``: the rank's own Python code installed a handler for ``signum`` (the rank
    bootstrap wrote it down). In a JAX process that handler may hold the signal, or JAX's
    service, set after it, may; which one cannot be read from outside, so it is not judged to
    refuse: cutting a handler's exit short loses what it saves or flushes, worse than a grace.
    ``handler_ran``: that handler ran on the signal; what the process does with it now (a
    handler may ignore it while it finishes) says nothing of whether it exits.
    """
    if handler_ran:
        return False
    if disposition is Disposition.IGNORED:
        return True
    return jax and signum == signal.SIGTERM and disposition is Disposition.CAUGHT and not own_handler


def exits_in_handler(
    signum: int, disposition: Disposition, jax: bool, own_handler: bool = False, handler_ran: bool = False
) -> bool:
    """Whether a rank alive just after ``signum`` is to be left its grace to exit: its own handler
    ran on the signal, or a handler caught it (``SigCgt``) that is not known to be one that never
    lets the rank exit (JAX's preemption service, :func:`never_exits_on`).

    Such a rank may be running its graceful exit: ``finally`` blocks and ``atexit`` handlers
    (``wandb.finish()``, MLflow's ``end_run``, a TensorBoard flush), an emergency save that
    serialises before it opens its file or writes outside the checkpoint directory. None of it
    shows as a checkpoint write, and a kill at once would cut it. A handler that is not Python's
    (a shell's ``trap``, a native library's) counts too: nothing says it is not the user's.
    One that ran counts whatever the process does with the signal now: a handler may set
    SIG_IGN to finish undisturbed, and Python puts the default action back as it finalizes.
    Not these: a rank that ignores the signal, blocks it, or leaves it to the default action
    and is still alive (in uninterruptible sleep, stopped), no handler of its own having run.
    """
    if handler_ran:
        return True
    return disposition is Disposition.CAUGHT and not never_exits_on(signum, disposition, jax, own_handler)


@dataclass(frozen=True)
class GraceKill:
    """A rank still alive when its grace ran out, SIGKILLed by the drain.

    ``jax``: the process had JAX loaded (``jaxlib`` in its memory map), whose
    distributed runtime installs a preemption handler for SIGTERM: survivors of a
    JAX job never exit on it. ``state``: its ``/proc`` state letter at the kill.
    ``own_handler``: the rank's own Python code had installed a handler for the signal
    (the rank bootstrap's record in its signals file); ``handler_ran``: that handler ran on it.

    ``collateral``: how a failure's drain treated it (None: a drain for another cause,
    which waits out its whole grace); ``waited_s``: killed at once, the seconds it was
    given after the signal (0: it clearly would never exit; else the node's short window);
    ``write``: what its node saw of checkpoint writes when it decided.
    """

    signal: int
    grace_s: float
    disposition: Disposition
    jax: bool = False
    state: str | None = None
    collateral: Collateral | None = None
    waited_s: float | None = None
    write: CheckpointWrite | None = None
    own_handler: bool = False
    handler_ran: bool = False

    @property
    def never_exits(self) -> bool:
        return never_exits_on(self.signal, self.disposition, self.jax, self.own_handler, self.handler_ran)

    @property
    def in_handler(self) -> bool:
        """Its handler caught the signal, and it gets the grace to exit (:func:`exits_in_handler`)."""
        return exits_in_handler(self.signal, self.disposition, self.jax, self.own_handler, self.handler_ran)

    def fields(self, rank: int, node: str) -> dict[str, Any]:
        """As journaled in ``workers_stopped``'s ``killed_at_grace``."""
        fields: dict[str, Any] = {
            "rank": rank,
            "node": node,
            "signal": signal_name(self.signal),
            "grace_s": self.grace_s,
            "disposition": self.disposition.value,
            "jax": self.jax,
            "state": self.state,
        }
        if self.own_handler:
            fields["own_handler"] = True
        if self.handler_ran:
            fields["handler_ran"] = True
        if self.collateral is not None:
            fields["collateral"] = self.collateral.value
            fields["waited_s"] = self.waited_s
        if self.write is not None:
            fields["checkpoint_dir_seen"] = self.write.directory
            fields["checkpoint_written_s"] = self.write.written_s
            fields["checkpoint_open_for_write"] = self.write.open_for_write
        return fields


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def grace_kill_from(record: Mapping[str, Any]) -> GraceKill:
    """A journaled entry of ``killed_at_grace`` as a value (unknown words read as unknown)."""
    try:
        disposition = Disposition(str(record.get("disposition")))
    except ValueError:
        disposition = Disposition.UNKNOWN
    signum = signal_number(str(record.get("signal") or "SIGTERM")) or int(signal.SIGTERM)
    try:
        collateral = None if record.get("collateral") is None else Collateral(str(record.get("collateral")))
    except ValueError:
        collateral = None  # a word of a later version: read as the whole grace's kill
    seen = record.get("checkpoint_dir_seen")
    write = None if not isinstance(seen, bool) else CheckpointWrite(
        seen, _number(record.get("checkpoint_written_s")), bool(record.get("checkpoint_open_for_write"))
    )
    return GraceKill(
        signal=signum,
        grace_s=_number(record.get("grace_s")) or 0.0,
        disposition=disposition,
        jax=bool(record.get("jax")),
        state=None if record.get("state") is None else str(record.get("state")),
        collateral=collateral,
        waited_s=_number(record.get("waited_s")),
        write=write,
        own_handler=record.get("own_handler") is True,
        handler_ran=record.get("handler_ran") is True,
    )


def _what_it_did(kill: GraceKill) -> str:
    name = signal_name(kill.signal)
    # JAX's preemption service handles SIGTERM only (what preemptible clouds send).
    if kill.handler_ran:
        return f"caught {name} in its own handler but did not exit"
    jax_term = kill.jax and kill.signal == signal.SIGTERM
    if jax_term and kill.disposition is Disposition.CAUGHT and kill.own_handler:
        return f"caught {name} but did not exit (its own handler, or JAX's preemption service set after it)"
    if jax_term and kill.disposition in (Disposition.IGNORED, Disposition.CAUGHT):
        return f"ignored {name} (JAX's preemption service catches it)"
    if kill.disposition is Disposition.IGNORED:
        return f"ignored {name}"
    if kill.disposition is Disposition.CAUGHT:
        return f"caught {name} but did not exit"
    if kill.disposition is Disposition.BLOCKED:
        return f"blocked {name}"
    if kill.state == "D":
        return f"did not exit on {name} (in uninterruptible sleep, likely I/O)"
    if kill.state in ("T", "t"):
        return f"did not exit on {name} (stopped, by SIGSTOP or a debugger)"
    return f"did not exit on {name}"


def _when(kill: GraceKill, option: str | None) -> str:
    """``killed after 5 s (--failure-grace)``, and for a failure's survivor why then."""
    flag = f" ({option})" if option else ""
    if kill.collateral is Collateral.AT_ONCE:
        waited = "at once" if not kill.waited_s else f"after {kill.waited_s:g} s"
        why = (kill.write or CheckpointWrite(True)).describe()
        return f"killed {waited}, not after {kill.grace_s:g} s{flag}: {why}"
    when = f"killed after {kill.grace_s:g} s{flag}"
    if kill.collateral is Collateral.UNSEEN:
        return f"{when}: {CheckpointWrite(False).describe()}"
    if kill.collateral is Collateral.WRITING:
        return f"{when}: {(kill.write or CheckpointWrite(True, open_for_write=True)).describe()}"
    if kill.collateral is Collateral.HANDLER:
        return f"{when}: a rank whose own handler caught {signal_name(kill.signal)} has the whole grace to exit"
    return when


def describe_grace_kills(kills: Iterable[tuple[int, GraceKill]], option: str | None = None) -> list[str]:
    """``rank 0 ignored SIGTERM; killed after 5 s``, one line per way of not exiting,
    ranks that did the same joined (``ranks 0, 2 ...``); ``option`` names the flag.
    A failure's survivor killed at once says so, and why it could be (``killed at once,
    not after 5 s (--failure-grace): no checkpoint write was under way``); one given the
    whole grace says why it was (its own handler caught the signal, a checkpoint write
    under way, or none could be seen)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for rank, kill in kills:
        groups.setdefault((_what_it_did(kill), _when(kill, option)), []).append(rank)
    return [f"{rank_list(ranks)} {what}; {when}" for (what, when), ranks in groups.items()]


class FailureKind(enum.Enum):
    """Why a worker (or the group) stopped; the policy table keys on it."""

    EXITED = "exited"
    CRASHED = "crashed"
    KILLED = "killed"
    TERMINATED = "terminated"
    HUNG = "hung"
    EXIT_HUNG = "exit-hung"
    PREEMPTED = "preempted"  # exited 0 after a stop signal from outside (elastic.core.rank_ends.StopSign)
    NODE_LOST = "node-lost"
    LAUNCH_FAILED = "launch-failed"
    COLLATERAL = "collateral"


CRASH_SIGNALS = frozenset(
    {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE}
)
TERMINATION_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})

# A shell reports a child killed by signal N as exit status 128 + N.
_SHELL_SIGNAL_BASE = 128


def describe_exit_hung(rank: object, node: str, message: str | None) -> str:
    """``rank 1 still running 300 s after rank 0 exited 0 and silent for 300 s (exit-hung on host; ...)``.

    ``message`` is the launcher's reason, then ``; `` and where the stacks went.
    """
    reason, _, note = (message or "still running after a peer exited 0").partition("; ")
    return f"rank {rank} {reason} (exit-hung on {node}{'; ' + note if note else ''})"


def decode_returncode(returncode: int) -> tuple[int | None, int | None]:
    """Split a Popen-style return code into ``(exit_code, signal)``.

    Negative codes are deaths by signal; ``128 + N`` from a shell wrapper is
    read as signal N as well, so ``bash -c 'python train.py'`` reports the same
    as running ``python train.py`` directly.
    """
    if returncode < 0:
        return None, -returncode
    if _SHELL_SIGNAL_BASE < returncode < _SHELL_SIGNAL_BASE + signal.NSIG:
        return None, returncode - _SHELL_SIGNAL_BASE
    return returncode, None


@dataclass(frozen=True)
class WorkerExit:
    """What a node agent saw when one worker process ended (or never started)."""

    attempt: int
    rank: int
    node: str
    returncode: int | None
    observed_at: float
    pid: int | None = None
    launch_error: str | None = None
    node_lost: str | None = None
    log_tail: tuple[str, ...] = ()
    error_message: str | None = None
    error_traceback: str | None = None  # the error file's py_callstack (torch's @record)
    hung: str | None = None  # why the node agent killed it as hung (no heartbeat)
    # Hung: how long it had shown no sign of progress when found hung (its node's watch measured it).
    silent_s: float | None = None
    # Still alive when the drain's grace ran out: SIGKILLed, and how it held the stop signal.
    killed_at_grace: GraceKill | None = None
    # Died of a SIGKILL its memory cgroup counted as an OOM kill: how the node knows (elastic.node.probes.oom_kills).
    oom_killed: str | None = None
    # An exit 0: what showed a stop signal the launcher did not send had reached it (None: nothing).
    # Whether it had said it finished (elastic.heartbeat(done=True)): read for an exit 0 that was
    # stopped, and for every failure (a crash in teardown is no failure: elastic.core.diagnosis.teardown).
    stopped_by: StopSign | None = None
    declared_done: bool = False
    # What the rank bootstrap wrote from inside the rank (elastic.core.evidence.RankAccount): the stop
    # handlers that ran and when, the exception sys.excepthook was handed. None: nothing written.
    account: RankAccount | None = None
    # The GPUs the launch plan gave it (its node's visible ones, or its own with --isolate-gpus;
    # 0: none); None: not known. A rank given one that says it finds none lost it with its node.
    gpus: int | None = None

    def ending(self) -> EndingError | None:
        """The exception that ended the rank's script, on the strongest evidence it left
        (:func:`elastic.core.evidence.ending_error`)."""
        died_of_signal = self.returncode is not None and decode_returncode(self.returncode)[1] is not None
        return ending_error(
            self.log_tail, uncaught=None if self.account is None else self.account.uncaught,
            recorded=self.error_message, died_of_signal=died_of_signal,
        )

    @property
    def succeeded(self) -> bool:
        return (
            self.launch_error is None
            and self.node_lost is None
            and self.hung is None
            and self.returncode == 0
        )


@dataclass(frozen=True)
class Failure:
    """One classified worker failure: the unit of restart accounting and reports."""

    kind: FailureKind
    attempt: int
    rank: int
    node: str
    observed_at: float
    exit_code: int | None = None
    signal: int | None = None
    message: str | None = None
    log_tail: tuple[str, ...] = field(default=(), compare=False)
    traceback: str | None = field(default=None, compare=False)  # what @record wrote
    silent_s: float | None = None  # hung: seconds without a sign of progress before it was found hung
    # What the rank said, read by the signature table (elastic.core.diagnosis.signatures); None: no rule matched.
    diagnosis: Diagnosis | None = field(default=None, compare=False)
    step: int | None = field(default=None, compare=False)  # the rank's last training step seen, if any
    ran_s: float | None = field(default=None, compare=False)  # seconds from its attempt's launch (None: not known)
    # Its attempt had shown a training step (any rank's) when it failed: with no step of its own
    # (a rank that prints none, a rank that ended while no driver watched), where it failed is not known.
    stepped: bool = field(default=False, compare=False)

    @property
    def signal_name(self) -> str | None:
        return None if self.signal is None else signal_name(self.signal)

    @property
    def exit_status(self) -> int:
        """The status a shell would report for this failure: code, or 128+N.

        A rank lost with its node never exited; it reads as SIGKILL, which is
        what the node's death amounted to for the rank. A preempted rank exited 0
        but reads as the signal that stopped it.
        """
        if self.signal is not None:
            return _SHELL_SIGNAL_BASE + self.signal
        if self.exit_code is not None:
            return self.exit_code
        return _SHELL_SIGNAL_BASE + signal.SIGKILL

    @property
    def node_label(self) -> str:
        return node_label(self.node)

    def describe(self) -> str:
        """One line a person reads: ``rank 1 on host killed (SIGKILL, signal 9)``."""
        if self.kind is FailureKind.LAUNCH_FAILED:
            return f"rank {self.rank} could not be launched: {self.message}"
        if self.kind is FailureKind.HUNG:
            return f"rank {self.rank} on {self.node_label} hung ({self.message or 'no heartbeat'})"
        if self.kind is FailureKind.EXIT_HUNG:
            return describe_exit_hung(self.rank, self.node_label, self.message)
        if self.kind is FailureKind.PREEMPTED:
            return f"rank {self.rank} on {self.node_label} preempted: exited 0 after it {self.message or 'was signalled'}"
        if self.kind is FailureKind.NODE_LOST or (self.exit_code is None and self.signal is None):
            return f"rank {self.rank} lost with node {self.node_label} ({self.message or 'node died'})"
        if self.signal is not None:
            how = f"{self.signal_name}, signal {self.signal}"
        else:
            how = f"exit code {self.exit_code}"
        if self.kind is FailureKind.COLLATERAL and self.diagnosis is not None and _candidate(self):
            # the attempt's cause, found in the drain
            return f"rank {self.rank} on {self.node_label} failed ({self.diagnosis.signature}), ended by the drain ({how})"
        return f"rank {self.rank} on {self.node_label} {self.kind.value} ({how})"


def classify(
    exit: WorkerExit, *, stop_sent: bool = False, failure_seen: bool = False, done_seen: bool = False
) -> FailureKind | None:
    """Sort a worker exit into a kind; ``None`` means it succeeded.

    ``stop_sent``: the launcher had already sent its stop signal to the group.
    ``failure_seen``: an earlier failure of the same attempt was observed.
    Either makes any unsuccessful exit collateral: a consequence, not a cause.
    A launch failure is never collateral: the command itself is broken.
    An exit 0 after a stop signal from outside (``stopped_by``) is preempted,
    unless the launcher had sent one itself (``stop_sent``: every exit is then
    the drain's) or the job had finished: the rank, or an earlier one of the
    attempt (``done_seen``), said so (``elastic.heartbeat(done=True)``).
    """
    if exit.launch_error is not None:
        return FailureKind.LAUNCH_FAILED
    if exit.succeeded:
        stopped = exit.stopped_by is not None and not exit.declared_done
        if stopped and not (stop_sent or failure_seen or done_seen):
            return FailureKind.PREEMPTED
        return None
    if stop_sent or failure_seen:
        return FailureKind.COLLATERAL
    if exit.node_lost is not None or exit.returncode is None:
        return FailureKind.NODE_LOST
    if exit.hung is not None:
        return FailureKind.HUNG
    _, signum = decode_returncode(exit.returncode)
    if signum is None:
        return FailureKind.EXITED
    if signum in CRASH_SIGNALS:
        return FailureKind.CRASHED
    if signum == signal.SIGKILL:
        return FailureKind.KILLED
    if signum in TERMINATION_SIGNALS:
        return FailureKind.TERMINATED
    return FailureKind.CRASHED


def to_failure(exit: WorkerExit, kind: FailureKind) -> Failure:
    """The failure record of a classified exit."""
    exit_code: int | None = None
    signum: int | None = None
    if exit.returncode is not None:
        exit_code, signum = decode_returncode(exit.returncode)
    message = exit.launch_error or exit.node_lost or exit.hung or exit.error_message
    if kind is FailureKind.PREEMPTED and exit.stopped_by is not None:
        # Exit code 0, and the signal that stopped it: its status is 128+N, as a death by it would be.
        signum, message = exit.stopped_by.signal, exit.stopped_by.how
    return Failure(
        kind=kind,
        attempt=exit.attempt,
        rank=exit.rank,
        node=exit.node,
        observed_at=exit.observed_at,
        exit_code=exit_code,
        signal=signum,
        message=message,
        log_tail=exit.log_tail,
        traceback=exit.error_traceback,
        silent_s=exit.silent_s,
    )


_NEVER_ROOT_CAUSE = frozenset({FailureKind.COLLATERAL})


class Cause(Protocol):
    """What the root-cause rule reads of a failure: a :class:`Failure`, or one read from a journal."""

    @property
    def kind(self) -> FailureKind | str: ...
    @property
    def observed_at(self) -> float: ...
    @property
    def rank(self) -> int | None: ...
    @property
    def diagnosis(self) -> Diagnosis | None: ...


_C = TypeVar("_C", bound=Cause)


def can_be_root_cause(kind: FailureKind | str) -> bool:
    """Whether a failure of this kind can be a root cause (a collateral one never is)."""
    try:
        return FailureKind(kind) not in _NEVER_ROOT_CAUSE
    except ValueError:  # a kind this version does not know
        return True


def _symptom(failure: Cause) -> bool:
    diagnosis = failure.diagnosis
    return diagnosis is not None and diagnosis.failure_class.value == "symptom"


def _candidate(failure: Cause) -> bool:
    """Not a consequence: a kind that can be a root cause, or a rank ended by the drain that
    had said why it failed itself (a signature that is no symptom: it was the cause found late)."""
    if can_be_root_cause(failure.kind):
        return True
    return failure.diagnosis is not None and not _symptom(failure)


def root_cause(failures: Iterable[_C]) -> _C | None:
    """The earliest failure that is not a consequence of another (ties: lowest rank); a symptom
    (a collective's timeout: :mod:`elastic.core.diagnosis.signatures`) only when no other explains it.

    The one rule: the controller keeps it live, :mod:`elastic.core.journal.fold` applies it to journals.
    """
    candidates = [f for f in failures if _candidate(f)]
    return min(candidates, key=lambda f: (_symptom(f), f.observed_at, f.rank or 0), default=None)
