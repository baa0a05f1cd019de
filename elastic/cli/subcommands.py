"""``elastic status`` and ``elastic logs``: reading a run directory, live or finished."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from elastic.core.checkpoints.names import parse_checkpoint_pattern
from elastic.core.journal.fold import FoldError
from elastic.core.journal.folded import optional_int
from elastic.core.labels import rank_ranges, without_own_prefix
from elastic.core.run_layout import RunLayout
from elastic.node.logs.follower import LogFollower
from elastic.run.watches.checkpoint_scan import CheckpointDirError, scan_checkpoints
from elastic.core.training.stall import ProgressPolicy
from elastic.run.records.journal import JournalError, driver_running, last_step_seen, read_journal
from elastic.views.status import (
    RankPlace, describe_exit_wait, describe_journal, describe_pids, describe_state, rank_places,
)

__all__ = [
    "heartbeat_ages",
    "latest_attempt",
    "show_logs",
    "show_stacks",
    "show_status",
    "write_stdout",
]

_RANK_LOG = re.compile(r"^rank-(\d+)\.log$")
_FOLLOW_POLL_S = 0.5


def latest_attempt(layout: RunLayout) -> int | None:
    numbers = [
        int(path.name.split("-", 1)[1])
        for path in layout.root.glob("attempt-*")
        if path.is_dir() and path.name.split("-", 1)[1].isdigit()
    ]
    return max(numbers) if numbers else None


def _rank_logs(layout: RunLayout, attempt: int) -> dict[int, Path]:
    """The rank logs of ``attempt`` on this node's disk."""
    logs: dict[int, Path] = {}
    if not layout.attempt_dir(attempt).is_dir():
        return logs
    for path in layout.attempt_dir(attempt).iterdir():
        match = _RANK_LOG.match(path.name)
        if match:
            logs[int(match.group(1))] = path
    return dict(sorted(logs.items()))


def heartbeat_ages(layout: RunLayout, attempt: int, now: float) -> dict[int, float]:
    """Seconds since each rank of ``attempt`` last touched its heartbeat file (this host's)."""
    ages = {}
    for path in layout.attempt_dir(attempt).glob("rank-*.heartbeat"):
        rank = path.name.split("-", 1)[1].split(".", 1)[0]
        try:
            ages[int(rank)] = max(0.0, now - path.stat().st_mtime)
        except (OSError, ValueError):
            continue
    return ages


def show_status(run_dir: Path, driver_alive: Callable[[int | None], bool]) -> list[str]:
    """The journal's story plus, for a live run, the driver's snapshot and heartbeat ages.

    Raises :class:`elastic.run.records.journal.JournalError` for a journal that cannot be read.
    """
    layout = RunLayout(run_dir)
    journal = read_journal(layout.journal)
    finished = any(e["event"] == "run_finished" for e in journal.events)
    state = _read_state(layout) or {}
    live = not finished and bool(state) and driver_alive(state.get("pid"))
    # Live: the ledger up to now; a dead driver's: up to the last step its attempt was seen at
    # (its state.json, its ranks' logs: the journal has the step at most once a minute).
    seen = _seen_after_death(layout, state) if state and not finished and not live else None
    until = time.time() if live else None if seen is None else seen[1]
    try:
        lines = describe_journal(journal.events, until)
    except FoldError as error:
        raise journal.unreadable(error) from error
    if journal.truncated_tail:
        lines.append("note: the journal's last line was cut off (the driver died writing it)")
    if finished or not state:
        return lines
    if not live:
        if seen is not None:
            lines.append(f"attempt {state.get('attempt')}: seen at step {seen[0]} at least when its driver died")
        lines.append(_driver_gone(state.get("pid"), state.get("run_id")))
        return lines
    attempt = latest_attempt(layout)
    ages = heartbeat_ages(layout, attempt, time.time()) if attempt is not None else {}
    state = {**state, "checkpoint_step": _checkpoint_step_now(state)}
    return (lines + describe_state(state, ages) + describe_pids(journal.events)
            + describe_exit_wait(journal.events, time.time()))


def _checkpoint_step_now(state: dict[str, Any]) -> object:
    """The step of the latest complete checkpoint in the run's ``--checkpoint-dir``, looked for
    now: the driver's ``state.json`` has the one of its last scan, at the attempt's start (the
    one it resumed from). That one when the directory cannot be read, or a ``state.json``
    written before it named the directory."""
    directory, pattern = state.get("checkpoint_dir"), state.get("checkpoint_pattern")
    if not isinstance(directory, str):
        return state.get("checkpoint_step")
    try:
        found = scan_checkpoints(
            Path(directory), parse_checkpoint_pattern(pattern) if isinstance(pattern, str) else None
        ).latest
    except (CheckpointDirError, ValueError):
        return state.get("checkpoint_step")
    return found.step if found is not None else None


def _driver_gone(pid: object, run_id: object) -> str:
    """What `elastic status` and `elastic logs --follow` say of a run whose driver died."""
    return (
        f"driver (pid {pid}) is not running: it died; rerun the same command "
        f"with --run-id {run_id} to continue"
    )


def _seen_after_death(layout: RunLayout, state: Mapping[str, Any]) -> tuple[int, float] | None:
    """The highest step a dead driver's running attempt was seen at, and when (epoch seconds);
    the ranks' logs read with the built-in step patterns (the run's --progress-pattern is not
    journaled)."""
    attempt = state.get("attempt")
    if state.get("phase") != "running" or not isinstance(attempt, int) or isinstance(attempt, bool):
        return None
    return last_step_seen(layout, attempt, ProgressPolicy())


def _read_state(layout: RunLayout) -> dict[str, Any] | None:
    """The driver's ``state.json`` as an object; None when it is missing, unreadable, or
    not a JSON object (a driver that died writing it, a file edited by hand)."""
    try:
        state = json.loads(layout.state.read_bytes())
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    return state if isinstance(state, dict) else None


def _who_drove(layout: RunLayout) -> tuple[object, object]:
    """The driver's pid and the run id: from state.json, else from the journal's first event."""
    state = _read_state(layout)
    if state is not None and state.get("run_id") is not None:
        return state.get("pid"), state.get("run_id")
    try:
        events = read_journal(layout.journal).events
    except JournalError:
        events = []
    started = next((e for e in events if e["event"] == "run_started"), {})
    return started.get("pid"), started.get("run_id")


def show_logs(
    run_dir: Path,
    *,
    rank: int | None,
    attempt: int | None,
    follow: bool,
    write: Callable[[str], None],
    note: Callable[[str], None] = lambda line: None,
) -> str | None:
    """Print an attempt's rank logs (``[rank R]`` prefixed unless one rank is asked for).

    With ``follow``, keep printing what ranks write until the run finishes, or
    until its driver is found dead (its lock on the run directory released, as
    `elastic status` tells), which ``note`` says with how to continue. Ranks
    that ran on another node have their logs there (the run directory is per
    node unless it is on shared storage): ``note`` says which and where. Returns
    an error message for the user, or ``None``.
    """
    layout = RunLayout(run_dir)
    if not layout.journal.exists():
        return f"{run_dir}: not a run directory (no journal.jsonl)"
    try:
        journal = read_journal(layout.journal)
    except JournalError as error:
        return str(error)
    events = journal.events
    chosen = _latest_started(events, layout) if attempt is None else attempt
    try:
        places = rank_places(events, chosen) if chosen is not None else {}
    except FoldError as error:
        return str(journal.unreadable(error))
    if chosen is None or not (places or layout.attempt_dir(chosen).is_dir()):
        return f"--attempt: {run_dir} has no attempt {attempt if attempt is not None else ''}".rstrip()
    logs = _rank_logs(layout, chosen)
    # On one machine every log is here; on Ray a missing one is on its own node.
    on_ray = any(e["event"] == "run_started" and e.get("backend") == "ray" for e in events)
    elsewhere = {r: place for r, place in places.items() if r not in logs} if on_ray else {}
    if rank is not None:
        if rank in elsewhere:
            return (
                f"--rank: rank {rank} of attempt {chosen} ran on {elsewhere[rank].describe()}; "
                f"its log is {layout.rank_log(chosen, rank)} on that node"
            )
        if rank not in logs:
            ranks = rank_ranges(set(logs) | set(places))
            return f"--rank: attempt {chosen} has no rank {rank} (ranks: {ranks})"
        logs = {rank: logs[rank]}
    else:
        _note_elsewhere(elsewhere, layout.attempt_dir(chosen), note)
    prefix = rank is None

    def emit(number: int, line: str) -> None:
        write(f"[rank {number}] {without_own_prefix(number, line)}" if prefix else line)

    if not follow:
        for number, path in logs.items():
            with path.open(encoding="utf-8", errors="replace") as log:
                for line in log:
                    emit(number, line.rstrip("\n"))
        return None
    follower = LogFollower(emit)
    for number, path in logs.items():
        follower.follow(number, str(path))
    try:
        while not _finished(layout) and not _STDOUT_CLOSED.is_set():
            if not driver_running(run_dir) and not _finished(layout):  # it may have just finished
                time.sleep(_FOLLOW_POLL_S)  # the last lines its ranks wrote, read
                note(_driver_gone(*_who_drove(layout)))
                break
            time.sleep(_FOLLOW_POLL_S)
    except KeyboardInterrupt:
        pass
    finally:
        follower.close()
    return None


def _latest_started(events: list[dict[str, Any]], layout: RunLayout) -> int | None:
    """The latest attempt the journal started, or else the latest one on this node's disk."""
    started = [int(e["attempt"]) for e in events if e["event"] == "attempt_started"]
    return max(started) if started else latest_attempt(layout)


def _note_elsewhere(elsewhere: dict[int, RankPlace], attempt_dir: Path, note: Callable[[str], None]) -> None:
    by_node: dict[RankPlace, list[int]] = {}
    for rank, place in elsewhere.items():
        by_node.setdefault(place, []).append(rank)
    for place, ranks in by_node.items():
        plural = "s" if len(ranks) > 1 else ""
        note(
            f"note: rank{plural} {rank_ranges(ranks)} ran on {place.describe()}; "
            f"{'their logs are' if plural else 'its log is'} in {attempt_dir} on that node"
        )


def _finished(layout: RunLayout) -> bool:
    try:
        return any(e["event"] == "run_finished" for e in read_journal(layout.journal).events)
    except Exception:  # a journal being written: not finished yet
        return False


_STDOUT_CLOSED = threading.Event()


def write_stdout(line: str) -> None:
    """Print a line; once the reader is gone (``| head``), print nothing more."""
    if _STDOUT_CLOSED.is_set():
        return
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _STDOUT_CLOSED.set()
        # Point stdout at /dev/null so the interpreter's final flush cannot fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def show_stacks(run_dir: Path, write: Callable[[str], None]) -> str | None:
    """Print the live stacks of every rank of a running job; an error message, or ``None``.

    On Ray the run's node agents dump their own ranks, wherever they run; on one
    machine the ranks are found by their environment and dumped here.
    """
    layout = RunLayout(run_dir)
    state = _read_state(layout)
    if state is None:
        return f"{run_dir}: not a run directory (no readable state.json)"
    if state.get("outcome") is not None:
        return f"run {state.get('run_id')} has finished ({state.get('outcome')}): no ranks to dump"
    run_id, attempt = str(state.get("run_id")), optional_int(state.get("attempt", 0))
    if attempt is None:
        return f"{layout.state}: attempt {state.get('attempt')!r} is not a whole number"
    if state.get("backend") == "ray" and state.get("cluster_address"):
        from elastic.backends.ray.agents.stacks import (
            dump_stacks_via_agents,  # Ray only when asked for
        )

        by_node = dump_stacks_via_agents(str(state["cluster_address"]), run_id)
    else:
        from elastic.node.probes.stacks import dump_ranks, find_ranks

        by_node = {"this machine": dump_ranks(find_ranks(run_id, attempt))}
    if not any(by_node.values()):
        return f"run {run_id}: no live ranks of attempt {attempt} found"
    for node, dumps in sorted(by_node.items()):
        for rank, text in sorted(dumps.items()):
            write(f"==== rank {rank} (node {node}, attempt {attempt}) ====")
            write(text.rstrip("\n"))
    return None
