"""What flows between the driver and the controller: observations in, commands out."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Union

from elastic.core.diagnosis.preflight import NodeCommandResult
from elastic.core.events import Record
from elastic.core.failures import Failure, WorkerExit
from elastic.core.inplace.reform import Reform
from elastic.core.rank_ends import HungRank

__all__ = [
    "Adopted",
    "AttemptLaunched",
    "AnnouncePreemption",
    "AttemptPlanned",
    "BackendFailed",
    "Command",
    "ExitHungKilled",
    "ExitTimeoutPassed",
    "FinishRun",
    "KillExitHung",
    "LaunchAttempt",
    "NodesUnavailable",
    "Observation",
    "PreflightRan",
    "Outcome",
    "PlanAttempt",
    "PreemptionNoticed",
    "ReformDeadlinePassed",
    "ReformFailed",
    "ReformWorld",
    "Resumed",
    "RunStarted",
    "RankSilence",
    "RankStep",
    "ScaleCheck",
    "HelperEnded",
    "SignOfLife",
    "SparesStarted",
    "StepsSeen",
    "StartExitTimer",
    "Decision",
    "StopRequested",
    "StopWorkers",
    "WatchReform",
    "WorkerExited",
    "WorkersStopped",
    "WorldReformed",
]


class Outcome(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


# -- observations: what the driver saw -------------------------------------------------


@dataclass(frozen=True)
class Adopted:
    """The attempt a dead driver ran, taken over with its ranks as its keepers kept them
    (:func:`elastic.core.takeover.reading.read_account`): it goes on under this driver, in
    ``running``, with no launch and no restart; the exits the keepers reaped meanwhile come
    next, as :class:`WorkerExited`, each dated to when it happened."""

    attempt: int
    world_size: int
    nodes: int
    generation: int  # this driver's: the keepers serve it now
    ran_s: float  # how long its ranks had run when taken over, from its launch
    resume_step: int | None = None  # the checkpoint the attempt resumed from, as its plan said
    exits_kept: int = 0
    first_step: tuple[int, int] | None = None  # (rank, step) of its first step, journaled by the dead driver
    sign_of_life: bool = False  # its first output or heartbeat was journaled by the dead driver


@dataclass(frozen=True)
class Resumed:
    """A dead driver's run taken over (recovery): what its journal folds to, and the checkpoint now."""

    no_progress_streak: int  # attempts in a row that ended without progress, as journaled
    interrupted: int | None = None  # the attempt it was running when it died, if one started
    interrupted_resume_step: int | None = None
    # The interrupted attempt had a preemption notice: it was ending for the notice when its
    # driver died (the machine taken at the deadline): no sign of a crash loop.
    interrupted_by_notice: bool = False
    checkpoint_step: int | None = None  # the latest complete checkpoint, found at the takeover
    # The interrupted attempt's highest step as the dead driver last wrote it down (its state.json),
    # and when (ISO time: the file's last change); None when it wrote none for that attempt.
    interrupted_step: int | None = None
    interrupted_step_at: str | None = None
    last_cause: Failure | None = None  # its last attempt's root cause (an identical one next stops the run)
    succeeded_attempt: int | None = None  # its last attempt, when every rank of it exited 0: the run is done
    # Checkpoint saves found at the takeover (elastic.worker.atomic_checkpoint's), each (began,
    # committed) in seconds before it: the interrupted attempt's, for the goodput ledger.
    saves_s_ago: tuple[tuple[float, float], ...] = ()
    # The interrupted attempt taken over with its ranks running; None: they were not (a keeper
    # missing, unproved or short of a rank), and it ends with its driver as before.
    adopted: Adopted | None = None


@dataclass(frozen=True)
class RunStarted:
    at: float
    resumed: Resumed | None = None


@dataclass(frozen=True)
class AttemptPlanned:
    """The backend found the nodes for the attempt and the driver planned its ranks."""

    attempt: int
    world_size: int
    at: float
    resume_step: int | None = None  # the checkpoint the attempt resumes from
    nodes: int = 1
    # The plan as the journal's attempt_started states it (nodes, addresses, ports, resume point).
    plan: Mapping[str, Any] = field(default_factory=dict)
    # Usable nodes the backend saw at placement, spares the attempt does not use included (nodes
    # left out not counted); None: not looked. Where a suspected node's ranks may go instead.
    available: int | None = None


@dataclass(frozen=True)
class ScaleCheck:
    """A periodic look at the cluster while running: usable nodes and the latest checkpoint."""

    attempt: int
    available_nodes: int
    checkpoint_step: int | None
    at: float


@dataclass(frozen=True)
class PreflightRan:
    """Every node of the planned attempt ran ``--preflight``: how each ended. ``available``:
    usable nodes the backend saw then (spares included); ``planned``: the attempt as planned,
    launched only if every node passed."""

    attempt: int
    results: tuple[NodeCommandResult, ...]
    available: int
    timeout_s: float  # --preflight-timeout, as it ran
    planned: AttemptPlanned
    at: float


@dataclass(frozen=True)
class NodesUnavailable:
    """Fewer nodes than the minimum came within the wait."""

    attempt: int
    needed: int
    seen: int
    at: float


@dataclass(frozen=True)
class AttemptLaunched:
    attempt: int
    world_size: int
    at: float


@dataclass(frozen=True)
class WorkerExited:
    exit: WorkerExit


@dataclass(frozen=True)
class SparesStarted:
    """A node started the warm spares of ``--spares`` (``pids``), once every rank of the attempt
    there ran on ``elastic.worker.inplace`` (:mod:`elastic.node.watchers.spares`); ``error``:
    why they could not start (then ``pids`` is empty). ``at``: on the driver's clock."""

    attempt: int
    node: str
    pids: tuple[int, ...]
    at: float
    error: str | None = None


@dataclass(frozen=True)
class HelperEnded:
    """A process that serves the attempt's ranks ended while the attempt ran (a stop's ends are
    not reported): ``role`` is ``spare`` or ``store`` (:class:`elastic.core.launch.spec.Role`),
    ``returncode`` as :class:`elastic.core.failures.WorkerExit` has it. ``at``: on the driver's clock."""

    attempt: int
    node: str
    role: str
    pid: int
    returncode: int
    at: float


@dataclass(frozen=True)
class SignOfLife:
    """The first sign of life of an attempt on a node: a rank's first output or heartbeat.

    ``source``: ``output`` (the rank's log got its first bytes) or ``heartbeat`` (its
    heartbeat file was written). ``at``: when it was written, on the driver's clock
    (the Ray backend restamps it on arrival, as it does exits).
    """

    attempt: int
    rank: int
    node: str
    source: str
    at: float


@dataclass(frozen=True)
class RankStep:
    """A rank's highest training step, read from its output or heartbeat, and when (driver's clock).

    ``step_time_s``: the rank's mean step time over its last
    :data:`elastic.core.training.stragglers.STRAGGLER_STEPS` steps, once its steps have
    settled (None before); ``time_source``: ``compute`` (the script's ``compute_s``) or
    ``interval`` (between its steps).
    """

    rank: int
    step: int
    source: str  # "output", "heartbeat" or "trainer" (elastic.core.training.stall.STEP_SOURCES)
    at: float
    step_time_s: float | None = None
    time_source: str | None = None
    # Sent with the rank's first step only: its start-up up to it, (phase, seconds) in
    # elastic.core.training.startup.PHASES order, as its node measured it; empty when not known.
    startup: tuple[tuple[str, float], ...] = ()
    # Sent with the rank's first step only: the first step it showed, where ``step`` is the
    # highest of the lines read with it (step 0 to 3 in one read: first_step 0, step 3); None after.
    first_step: int | None = None


@dataclass(frozen=True)
class StepsSeen:
    """The latest steps of an attempt's ranks on a node, rate-limited by the node.

    A node sends a rank's first step of the attempt at once, then at most one of
    these every second (:data:`elastic.node.watchers.steps.REPORT_EVERY_S`). ``at``: when the node sent it, on the driver's clock
    (the Ray backend restamps every time, as it does exits).
    """

    attempt: int
    node: str
    steps: tuple[RankStep, ...]
    at: float

    def shifted(self, offset_s: float) -> StepsSeen:
        """The same steps with every time moved by ``offset_s`` (onto another clock)."""
        return StepsSeen(
            self.attempt, self.node,
            tuple(replace(s, at=s.at + offset_s) for s in self.steps),
            self.at + offset_s,
        )


@dataclass(frozen=True)
class StopRequested:
    """The launcher itself received a stop signal (SIGTERM, SIGINT, SIGHUP)."""

    signum: int
    at: float


@dataclass(frozen=True)
class PreemptionNoticed:
    """A preemption notice: the launcher's ``--notice-signal`` (the whole job is going) or,
    on Ray, nodes of the attempt drained with a deadline (they are going).

    ``source``: ``signal SIGUSR1`` or ``ray drain of node X``. ``deadline_at``: when the
    leaving nodes go, on the driver's clock; ``None``: none given (``--grace-period``).
    ``nodes``: the leaving nodes, empty for the whole job; then ``attempt``, the attempt
    whose ranks run there, and ``usable_nodes``, how many usable nodes remain without them.
    """

    source: str
    at: float
    deadline_at: float | None = None
    nodes: tuple[str, ...] = ()
    attempt: int | None = None
    usable_nodes: int = 0


@dataclass(frozen=True)
class WorkersStopped:
    attempt: int
    at: float
    checkpoint_step: int | None = None  # the latest complete checkpoint after the drain
    # Checkpoint saves committed since the drain before (elastic.worker.atomic_checkpoint's), each
    # (began, committed) in seconds before ``at``: the goodput ledger's.
    saves_s_ago: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class WorldReformed:
    """The nodes re-formed attempt ``attempt``'s world in place as attempt ``attempt + 1``
    (:class:`ReformWorld`): its ranks' pids by rank (survivors' unchanged, spares' in the lost
    places), and, as after a drain, the latest complete checkpoint and the saves since the last
    look (:class:`WorkersStopped`'s)."""

    attempt: int
    at: float
    pids: Mapping[int, int]
    checkpoint_step: int | None = None
    saves_s_ago: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class ReformFailed:
    """A node could not do its part of re-forming attempt ``attempt`` in place (``reason``: its
    spare is gone, the backend cannot): the run falls back to a full restart."""

    attempt: int
    at: float
    reason: str


@dataclass(frozen=True)
class ReformDeadlinePassed:
    """The time a re-formed attempt ``attempt`` had to show its first step is over
    (:class:`WatchReform`); ``at``: on the driver's clock."""

    attempt: int
    at: float


@dataclass(frozen=True)
class RankSilence:
    """How long a running rank had shown no sign of life when its node looked: no output,
    heartbeat file change or write in the checkpoint directory for ``silent_s`` seconds.

    ``sign``: its latest sign, ``output``, ``heartbeat`` or ``checkpoint write``; ``start``
    when it showed none since it started ``silent_s`` ago.
    """

    rank: int
    silent_s: float
    sign: str


@dataclass(frozen=True)
class ExitTimeoutPassed:
    """The deadline of a :class:`StartExitTimer` came.

    ``silences``: the attempt's running ranks' silence then, as their nodes measured it
    (a rank left out, its node out of reach, counts as silent).
    """

    attempt: int
    at: float
    silences: tuple[RankSilence, ...] = ()


@dataclass(frozen=True)
class ExitHungKilled:
    """The ranks of a :class:`KillExitHung` were dumped and sent SIGKILL.

    ``seen``: what their nodes saw of each just before (whether it had said it was
    done, where its stack was, how long it had been silent), the evidence that it had
    finished (:func:`elastic.core.rank_ends.judge_finished`); a rank its node could not
    reach is left out. Their exits follow as they are reaped. ``incomplete_checkpoint``: the
    newest checkpoint entry that is not whole, newer than the latest complete one, when the driver
    looked (None: none), which takes from quiet the proof that the work had ended.
    """

    attempt: int
    ranks: tuple[int, ...]
    seen: tuple[HungRank, ...]
    at: float
    incomplete_checkpoint: str | None = None


@dataclass(frozen=True)
class BackendFailed:
    """The backend can no longer report exits (its event pump died, or the driver lost Ray).

    ``requeue``: the infrastructure failed, not elastic: worth requeueing.
    """

    reason: str
    requeue: bool
    at: float


Observation = Union[
    RunStarted,
    ScaleCheck,
    AttemptPlanned,
    PreflightRan,
    NodesUnavailable,
    AttemptLaunched,
    WorkerExited,
    SignOfLife,
    StepsSeen,
    SparesStarted,
    HelperEnded,
    StopRequested,
    PreemptionNoticed,
    WorkersStopped,
    WorldReformed,
    ReformFailed,
    ReformDeadlinePassed,
    ExitTimeoutPassed,
    ExitHungKilled,
    BackendFailed,
]


# -- commands: what the driver must do -------------------------------------------------


@dataclass(frozen=True)
class PlanAttempt:
    """Wait ``delay_s`` (backoff), then for enough nodes; then plan the attempt's world."""

    attempt: int
    delay_s: float = 0.0
    leave_out: tuple[str, ...] = ()  # nodes not to place it on (stragglers' nodes, --on-straggler restart)
    longest_init_s: float | None = None  # the run's longest distributed initialisation so far (--init-timeout auto)


@dataclass(frozen=True)
class LaunchAttempt:
    attempt: int


@dataclass(frozen=True)
class ReformWorld:
    """Re-form attempt ``attempt``'s world in place as the next attempt, as ``reform`` says
    (:mod:`elastic.core.inplace.reform`): each survivor told its place, each lost place handed to
    a warm spare; report :class:`WorldReformed` or :class:`ReformFailed` before any other
    observation."""

    attempt: int
    reform: Reform


@dataclass(frozen=True)
class WatchReform:
    """Report :class:`ReformDeadlinePassed` for attempt ``attempt`` ``deadline_s`` seconds from now."""

    attempt: int
    deadline_s: float


@dataclass(frozen=True)
class StopWorkers:
    """Send ``signal`` to every worker of the attempt, wait ``grace_s``, then SIGKILL.

    ``collateral``: the drain follows a failure, so the ranks' group is already broken: a
    rank that will not exit on the signal is killed as soon as that is clear, unless a
    checkpoint write is under way on its node (:class:`elastic.core.failures.Collateral`).
    """

    attempt: int
    signal: int
    grace_s: float
    collateral: bool = False


@dataclass(frozen=True)
class AnnouncePreemption:
    """Tell every running rank of the attempt of the notice (``ELASTIC_PREEMPTION_FILE``),
    before :class:`StopWorkers` sends ``signal`` (0: none) and waits until ``deadline_at``."""

    attempt: int
    source: str
    deadline_at: float
    signal: int


@dataclass(frozen=True)
class FinishRun:
    outcome: Outcome
    exit_status: int
    root_cause: Failure | None
    reason: str


@dataclass(frozen=True)
class StartExitTimer:
    """At ``deadline_at`` report :class:`ExitTimeoutPassed` (``--exit-timeout``): after a rank's
    exit 0, or again after ranks still running had shown signs of life; replaces any earlier deadline."""

    attempt: int
    deadline_at: float


@dataclass(frozen=True)
class KillExitHung:
    """Dump the stacks of these ranks, then SIGKILL them, as hung at exit for ``reason``.

    Report what was seen of each just before (:class:`ExitHungKilled`), before any other
    observation.
    """

    attempt: int
    ranks: tuple[int, ...]
    reason: str
    detected_at: float


Command = Union[
    PlanAttempt, LaunchAttempt, ReformWorld, WatchReform, AnnouncePreemption, StopWorkers, FinishRun,
    StartExitTimer, KillExitHung,
]


@dataclass(frozen=True)
class Decision:
    """The result of one observation: journal first, then act."""

    records: tuple[Record, ...]
    commands: tuple[Command, ...]


