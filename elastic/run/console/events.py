"""What the console shows of the launcher's events: which, at each verbosity, and in words.

The journal keeps every event; the console is for the person who started the run.
By default it shows what a person acts on: one line when the run starts (its id,
directory and world), each failure (with its signature) and what elastic does about it
(the restart and the attempt it starts, the backoff, a node left out, a run given up),
the warnings, and then the summary. ``-v/--verbose`` shows every event, ``-q/--quiet`` only the
warnings and errors. :class:`ConsoleEvents` is a structlog processor that drops what
the verbosity leaves out; :meth:`ConsoleEvents.render` says the rest in words
(``--log-format console``), or the JSON renderer writes them (``--log-format json``).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import structlog

from elastic.core.events import EventName, LogEvent
from elastic.core.journal.fold import failure_from
from elastic.core.labels import node_label, plural, rank_list
from elastic.core.training.stragglers import straggler_text
from elastic.views.report import notice_text

__all__ = ["ConsoleEvents", "Verbosity"]


class Verbosity(enum.Enum):
    QUIET = "quiet"  # warnings, errors and the summary
    DEFAULT = "default"  # also the run's start and what elastic does about each failure
    VERBOSE = "verbose"  # every event


_LOUD = frozenset({"warning", "error", "critical", "exception"})  # shown even with --quiet

# Events a person acts on, shown by default though logged at info: the run's start, what
# elastic does about a failure, a notice, and what the person asked to be told.
_SHOWN = frozenset({
    EventName.RUN_STARTED.value,
    EventName.RUN_RESUMED.value,
    EventName.LEFTOVERS_STOPPED.value,
    EventName.METRICS_SERVING.value,
    EventName.ATTEMPT_STARTED.value,  # every attempt but the run's first: the restart, and from where
    EventName.RESTART_SCHEDULED.value,
    EventName.WORLD_REFORMED.value,
    EventName.INPLACE_FELL_BACK.value,
    EventName.BACKOFF_STARTED.value,
    EventName.SCALE_UP_SCHEDULED.value,
    EventName.ROOT_CAUSE_REVISED.value,
    EventName.NODE_EXCLUDED.value,
    EventName.CRASH_LOOP_DETECTED.value,
    EventName.PREEMPTION_NOTICED.value,
    EventName.EXIT_HANG_DETECTED.value,
    EventName.EXIT_HUNG_KILLED.value,
    EventName.WORKERS_STOPPED.value,  # only with a rerun warning
    LogEvent.NODES_AWAITED.value,  # only when the count of nodes changes
    LogEvent.RANKS_AWAITED.value,  # ranks still running a while after a peer's exit 0
})

_NOT_SHOWN = frozenset({"event", "level", "timestamp", "run_id", "attempt"})  # in key=value lines


class ConsoleEvents:
    """Chooses and words the launcher's events for the console (thread-safe: the driver, the
    Ray event pump and the checkpoint scan all log)."""

    def __init__(self, verbosity: Verbosity, *, run_dir: str | None = None) -> None:
        self._verbosity = verbosity
        self._run_dir = run_dir
        self._lock = threading.Lock()
        self._attempt_seen = False  # the run's first attempt is in its start line
        self._nodes_awaited: tuple[object, object] | None = None

    # -- choosing ----------------------------------------------------------------------

    def __call__(self, _logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        """structlog processor: drop what the verbosity leaves out."""
        if not self.shows(event_dict):
            raise structlog.DropEvent
        return event_dict

    def shows(self, event: Mapping[str, Any]) -> bool:
        name = event.get("event")
        with self._lock:
            first_attempt = False
            if name == EventName.ATTEMPT_STARTED.value:
                first_attempt, self._attempt_seen = not self._attempt_seen, True
            if self._verbosity is Verbosity.VERBOSE:
                return True
            if event.get("level") in _LOUD:
                return True
            if self._verbosity is Verbosity.QUIET or name not in _SHOWN:
                return False
            if name == EventName.ATTEMPT_STARTED.value:
                return not first_attempt
            if name == EventName.WORKERS_STOPPED.value:
                return bool(event.get("rerun_warning"))
            if name == LogEvent.NODES_AWAITED.value:
                counts = (event.get("needed"), event.get("available"))
                changed, self._nodes_awaited = counts != self._nodes_awaited, counts
                return changed
            return True

    # -- wording -----------------------------------------------------------------------

    def render(self, _logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> str:
        """structlog renderer: ``elastic: <what happened>``, or ``elastic: <event> key=value ...``
        for an event with no words of its own."""
        words = _WORDS.get(str(event_dict.get("event")))
        text = None
        if words is not None:
            try:
                text = words(self, event_dict)
            except (KeyError, TypeError, ValueError):  # a field missing or odd: the plain form
                text = None
        if text is None:
            text = _key_values(event_dict)
            if event_dict.get("level") in _LOUD:
                text = f"{event_dict.get('level')}: {text}"
        return f"elastic: {text}"

    def _run_started(self, e: Mapping[str, Any]) -> str:
        where = e.get("run_dir") or self._run_dir
        return f"run {e['run_id']} started: {_world(e)}" + (f"; run directory {where}" if where else "")


def _key_values(event: Mapping[str, Any]) -> str:
    parts = [str(event.get("event"))]
    if "attempt" in event:
        parts.append(f"attempt={event['attempt']}")
    for key, value in event.items():
        if key in _NOT_SHOWN:
            continue
        text = str(value)
        parts.append(f"{key}={text!r}" if (not text or any(c.isspace() for c in text)) else f"{key}={text}")
    return " ".join(parts)


def _world(e: Mapping[str, Any]) -> str:
    """``2 ranks on this machine``, ``4 ranks per node on 2 to 4 nodes (ray)``."""
    nproc = e.get("nproc_per_node")
    low, _, high = str(e.get("nnodes", "1:1")).partition(":")
    nodes = low if low == (high or low) else f"{low} to {high}"
    if e.get("backend") == "local":
        return f"{plural(int(nproc), 'rank')} on this machine" if nproc else "a rank per GPU on this machine"
    per_node = f"{plural(int(nproc), 'rank')} per node" if nproc else "a rank per GPU (1 without GPUs)"
    return f"{per_node} on {nodes} {'node' if nodes == '1' else 'nodes'} ({e.get('backend')})"


def _nodes(nodes: list[Any]) -> str:
    labels = [node_label(str(n)) for n in nodes]
    return ", ".join(labels) if len(labels) <= 3 else plural(len(labels), "node")


def _handed_over(e: Mapping[str, Any]) -> str:
    """Which checkpoint elastic handed the attempt's ranks (``ELASTIC_RESUME_FROM``), and only that:
    a script that resumes from a file of its own does so whatever elastic says here."""
    step = e.get("resume_step")
    if step is not None:
        return f"resuming from checkpoint step {step}"
    if e.get("checkpoint_dir"):
        return "no checkpoint handed over (none in --checkpoint-dir yet)"
    if "checkpoint_dir" in e:
        return "no checkpoint handed over (no --checkpoint-dir)"
    return "no checkpoint handed over"  # a journal from before the plan named its directory


def _attempt_started(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    if e.get("reformed_from") is not None:  # --spares: its ranks run already, no checkpoint is read
        return (f"attempt {e['attempt']}: {plural(int(e['world_size']), 'rank')} on {_nodes(e['nodes'])}, "
                f"re-formed in place (generation {e.get('generation')}), each back at its last step in memory")
    start = _handed_over(e)
    changed = ", a new world" if e.get("world_changed") else ""
    return f"attempt {e['attempt']}: {plural(int(e['world_size']), 'rank')} on {_nodes(e['nodes'])}{changed}, {start}"


def _worker_failed(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    """The failure as the summary says it, with its signature (elastic.core.diagnosis.signatures)."""
    failure = failure_from(e).to_failure()
    text = failure.describe()
    if failure.diagnosis is not None and failure.diagnosis.signature not in text:
        text += f" [{failure.diagnosis.signature}]"
    return f"attempt {e['attempt']}: {text}"


_BUDGET_FLAG = {"failures": "--max-restarts", "preemptions": "--max-preemptions"}


def _restart_scheduled(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    budget, remaining = e.get("budget"), e.get("remaining")
    if budget is None:
        why = e.get("reason")
    elif remaining is None:
        why = f"{_BUDGET_FLAG.get(budget, budget)}: unlimited"
    else:
        why = f"{plural(int(remaining), 'restart')} left, {_BUDGET_FLAG.get(budget, budget)}"
    if e.get("in_place"):
        return f"attempt {e['attempt']}: repairing in place ({why})"
    return f"attempt {e['attempt']}: restarting the ranks ({why})"


def _world_reformed(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    """``attempt 0: rank 0 goes on in its process, rank 1's place goes to a warm spare``."""
    kept = [old for old, _ in e.get("survivors") or ()]
    handed = e.get("joiners") or []
    moved = "" if e.get("identical") else ", renumbered"
    return (f"attempt {e['attempt']}: {rank_list(kept)} {'goes' if len(kept) == 1 else 'go'} on in "
            f"{'its process' if len(kept) == 1 else 'their processes'}{moved}, "
            f"{rank_list(handed)}'s place{'s go' if len(handed) > 1 else ' goes'} to a warm spare")


def _backoff_started(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    return (f"waiting {float(e['delay_s']):.1f}s before attempt {e['attempt']} "
            "(--backoff: the last attempt saved no newer checkpoint)")


def _not_restarting(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    return f"attempt {e['attempt']}: not restarting: {e['reason']}"


def _stop_requested(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    signal = e["signal"]
    if int(e.get("count") or 1) > 1:
        return f"{signal} again: killing the ranks now"
    return f"{signal}: stopping the ranks (another {signal} kills them at once)"


def _preemption_noticed(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    return f"attempt {e['attempt']}: {notice_text(e)}"


def _exit_hang_detected(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    """``attempt 0: rank 1 hung at exit (--exit-timeout)``: its reason (still running, silent) is
    said once, in the failure's line that follows the kill."""
    return f"attempt {e['attempt']}: {rank_list(e['ranks'])} hung at exit (--exit-timeout)"


def _exit_hung_killed(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    done = e.get("declared_finished") or []
    said = f" ({rank_list(done)} said they had finished)" if done else ""
    return f"attempt {e['attempt']}: killed {rank_list(e['ranks'])}, hung at exit{said}"


def _checkpoint_rejected(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    step = e.get("step")
    return (f"warning: checkpoint {e['entry']}{'' if step is None else f' (step {step})'} "
            f"rejected: {e['reason']}")


def _checkpoints_unrecognised(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    entries = ", ".join(str(x) for x in e.get("entries") or [])
    return (f"warning: nothing in {e['checkpoint_dir']} is named like a checkpoint ({entries}); "
            "name yours with --checkpoint-pattern (see docs/getting-started/restarts-and-checkpoints.md)")


def _nodes_awaited(_: ConsoleEvents, e: Mapping[str, Any]) -> str:
    return (f"waiting for nodes: {e['available']} of the {e['needed']} needed are available "
            "(--node-wait-timeout)")


def _exit_wait(e: Mapping[str, Any]) -> str:
    """``attempt 0: rank 0 exited 0 2 s ago (its last step seen: 5); waiting up to 300 s (--exit-timeout)
    for rank 1 to exit``."""
    ranks = list(e["ranks"])
    who = rank_list(ranks) if len(ranks) <= 8 else plural(len(ranks), "rank")
    step = "" if e.get("step") is None else f" (its last step seen: {e['step']})"
    return (f"attempt {e['attempt']}: rank {e['rank']} exited 0 {e['waited_s']:.0f} s ago{step}; waiting up to "
            f"{e['exit_timeout_s']:g} s (--exit-timeout) for {who} to exit")


_WORDS: dict[str, Callable[[ConsoleEvents, Mapping[str, Any]], str | None]] = {
    EventName.RUN_STARTED.value: ConsoleEvents._run_started,
    EventName.RUN_RESUMED.value: lambda _, e: (
        f"{'taking over' if e.get('adopted') else 'continuing'} run {e['run_id']} at attempt {e['attempt']}"
        f"{' with its running ranks' if e.get('adopted') else ''}: its last driver (pid "
        f"{e.get('previous_driver_pid')}) {'died' if e.get('previous_outcome') is None else 'was ' + str(e['previous_outcome'])}"
    ),
    EventName.LEFTOVERS_STOPPED.value: lambda _, e: (
        ("stopped the ranks the dead driver's spawner kept (--orphan-lease): "
         if e.get("record") == "keeper.json" else "stopped what the dead driver's embedded Ray left running: ")
        + ", ".join(f"{p['name']} (pid {p['pid']})" for p in e["processes"])
    ),
    EventName.METRICS_SERVING.value: lambda _, e: f"metrics at http://{e['host']}:{e['port']}/metrics",
    EventName.ATTEMPT_STARTED.value: _attempt_started,
    EventName.WORKER_FAILED.value: _worker_failed,
    EventName.RESTART_SCHEDULED.value: _restart_scheduled,
    EventName.WORLD_REFORMED.value: _world_reformed,
    EventName.INPLACE_FELL_BACK.value: lambda _, e: f"attempt {e['attempt']}: not repaired in place: {e['reason']}",
    EventName.BACKOFF_STARTED.value: _backoff_started,
    EventName.SCALE_UP_SCHEDULED.value: lambda _, e: f"attempt {e['attempt']}: growing the world: {e['reason']}",
    EventName.ROOT_CAUSE_REVISED.value: lambda _, e: (
        f"attempt {e['attempt']}: root cause revised to {e['revised']} ({e['reason']})"
    ),
    EventName.NODE_EXCLUDED.value: lambda _, e: (
        f"attempt {e['attempt']}: node {node_label(str(e['node']))} left out of the next attempts: {e['reason']}"
    ),
    EventName.NODE_KEPT.value: lambda _, e: (
        f"warning: attempt {e['attempt']}: node {node_label(str(e['node']))} suspected: {e['reason']}"
    ),
    EventName.BUDGET_EXHAUSTED.value: _not_restarting,
    EventName.RESTART_REFUSED.value: _not_restarting,
    EventName.CRASH_LOOP_DETECTED.value: lambda _, e: f"attempt {e['attempt']}: crash loop: {e['reason']}",
    EventName.STOP_REQUESTED.value: _stop_requested,
    EventName.PREEMPTION_NOTICED.value: _preemption_noticed,
    LogEvent.RANKS_AWAITED.value: lambda _, e: _exit_wait(e),
    EventName.EXIT_HANG_DETECTED.value: _exit_hang_detected,
    EventName.EXIT_HUNG_KILLED.value: _exit_hung_killed,
    EventName.BACKEND_FAILED.value: lambda _, e: f"error: the backend failed: {e['reason']}",
    EventName.WORKERS_STOPPED.value: lambda _, e: (
        f"warning: attempt {e['attempt']}: {e['rerun_warning']}" if e.get("rerun_warning") else None
    ),
    EventName.CHECKPOINT_REJECTED.value: _checkpoint_rejected,
    EventName.CHECKPOINTS_UNRECOGNISED.value: _checkpoints_unrecognised,
    EventName.COMPILE_CACHE_REPLACED.value: lambda _, e: (
        f"warning: attempt {e['attempt']}: rank {e['rank']}'s compilation cache: {e['reason']}"
    ),
    EventName.STRAGGLER_SEEN.value: lambda _, e: f"warning: attempt {e['attempt']}: straggler: {straggler_text(e)}",
    LogEvent.NODES_AWAITED.value: _nodes_awaited,
}
