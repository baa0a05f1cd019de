"""The driver's side of ranks kept by their spawner (``--orphan-lease``): the record of the keeper
and its ranks in the run directory, and the stop of what a dead driver's keeper still keeps.

A spawner given a lease keeps its ranks when its driver dies without releasing it
(:mod:`elastic.node.spawner.process`; ``docs/design/driver-takeover.md``). So that the next
driver of the run can find them, the supervisor records the keeper and each rank as they start
(:class:`KeeperRecord`: pid, start time and boot id, the format of
:mod:`elastic.node.process_record`, with the run's id and the driver's generation), before
anything can kill the driver without warning.

Until a new driver can take kept ranks over, it stops them before it starts anything
(:func:`stop_kept`): it reaches the keeper on its socket (:mod:`elastic.node.spawner.keeper_socket`),
believes it only on proof (:func:`elastic.core.takeover.reading.prove`), reads what happened
while no driver was there (its account: each rank's exit since the loss), and has it drain them
(the stop signal, the grace, the sweep) under the next generation. A keeper it cannot reach or
believe gets SIGTERM instead while it is still the process recorded (pinned by a pidfd, its
start time checked), which drains them the same way. Whatever is still the process recorded
past that is SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from elastic.core.launch.spec import WorkerSpec
from elastic.core.takeover.generations import next_generation
from elastic.core.takeover.lease import Lease
from elastic.core.takeover.reading import Account, Identity, KeptExit, KeptRank, prove
from elastic.node.process_record import (
    RecordedProcess,
    identify,
    read_record,
    signal_recorded,
    still_recorded,
    stop_recorded,
    write_record,
)
from elastic.node.spawner import keeper_socket
from elastic.node.spawner.messages import OP_SIGNAL_ALL, SIGNAL_FRAME, read_message

__all__ = [
    "AdoptedKeeper", "KeepTerms", "KeeperRecord", "KeptStop", "Reached", "reach_keeper", "recorded_generation",
    "resume_keeper", "stop_kept",
]

_POLL_S = 0.05
_SWEEP_ALLOWANCE_S = 15.0  # past the grace: the keeper's sweep (10 s at most) and its exit
# A keeper notices its driver's death within milliseconds (its pipes' end, its parent-death
# signal) and only then listens; a driver taking over at once waits this long for it.
_NOTICE_S = 2.0


@dataclass(frozen=True)
class KeepTerms:
    """What a driver gives each spawner of its host: the lease, where to record the keeper, the
    run's id and the driver's generation (which a keeper tells a new driver)."""

    lease: Lease
    record: Path
    run_id: str = ""
    generation: int = 1


class KeeperRecord:
    """The record of one keeper and the ranks it started, rewritten whole as they come and go."""

    def __init__(self, terms: KeepTerms) -> None:
        self._terms = terms
        self._lock = threading.Lock()
        self._keeper: RecordedProcess | None = None
        self._ranks: dict[int, RecordedProcess] = {}

    def keeper(self, pid: int) -> None:
        """A new spawner keeps this host's ranks (the one before it is gone, with its ranks)."""
        with self._lock:
            self._keeper, self._ranks = identify(pid), {}
            self._write()

    def rank(self, pid: int) -> None:
        with self._lock:
            process = identify(pid)
            if process is not None:
                self._ranks[pid] = process
                self._write()

    def ranks_gone(self) -> None:
        """Every rank is reaped (a drain's end): the record names the keeper alone."""
        with self._lock:
            if self._ranks:
                self._ranks = {}
                self._write()

    def released(self) -> None:
        """The keeper was released and is gone: the record names nothing."""
        with self._lock:
            self._keeper, self._ranks = None, {}
            self._write()

    def _write(self) -> None:
        processes = ([self._keeper] if self._keeper is not None else []) + list(self._ranks.values())
        fields = {"lease_s": self._terms.lease.lease_s, "grace_s": self._terms.lease.grace_s,
                  "keeper": self._keeper.pid if self._keeper is not None else None,
                  "run_id": self._terms.run_id, "generation": self._terms.generation}
        try:
            write_record(self._terms.record, fields, processes)
        except OSError:
            pass  # the run directory's own writes report a full or read-only disk


def recorded_generation(record: Path) -> int:
    """The generation of the driver whose keeper ``record`` names (0: none recorded)."""
    generation = read_record(record)[0].get("generation")
    return generation if isinstance(generation, int) else 0


@dataclass(frozen=True)
class Reached:
    """A keeper reached on its socket: believed (``refused`` None, with its account) or not."""

    keeper: RecordedProcess
    refused: str | None = None
    account: Account | None = None


def reach_keeper(record: Path, run_id: str, generation: int) -> Reached | None:
    """The keeper ``record`` names, reached and proved for a driver of ``generation`` taking over
    ``run_id``, with its account; None when the record names no live keeper."""
    fields, processes = read_record(record)
    keeper = next((p for p in processes if p.pid == fields.get("keeper")), None)
    if keeper is None or not still_recorded(keeper):
        return None
    name = keeper_socket.address(keeper.pid, keeper.started)
    recorded = Identity(keeper.pid, keeper.started, keeper.boot, str(fields.get("run_id") or ""),
                        int(fields.get("generation") or 0))
    hello = keeper_socket.ask(name, {"t": "hello"}, pid=keeper.pid)  # the very process, not one holding its name
    deadline_at = time.monotonic() + _NOTICE_S
    while hello is None and time.monotonic() < deadline_at and still_recorded(keeper):
        time.sleep(_POLL_S)  # its driver just died: it listens once it has noticed
        hello = keeper_socket.ask(name, {"t": "hello"}, pid=keeper.pid)
    refusal = prove(recorded, _identity(hello), run_id=run_id, generation=generation)
    if refusal is not None:
        return Reached(keeper, refusal)
    answer = keeper_socket.ask(name, {"t": "account", "after": 0}, pid=keeper.pid)
    if answer is None or answer.get("t") != "account":
        return Reached(keeper, f"keeper pid {keeper.pid} gave no account")
    return Reached(keeper, None, Account(
        node="",
        ranks=tuple(KeptRank(int(a), int(r), int(pid)) for a, r, pid in answer["ranks"]),
        exits=tuple(KeptExit(int(pid), int(code), float(at)) for pid, code, at in answer["exits"]),
    ))


def _identity(hello: Mapping[str, Any] | None) -> Identity | None:
    if hello is None or hello.get("t") != "hello":
        return None
    return Identity(int(hello["pid"]), int(hello["started"]), str(hello["boot"]), str(hello["run_id"]),
                    int(hello["generation"]))


@dataclass(frozen=True)
class KeptStop:
    """What a new driver stopped of a dead driver's keeper: its processes alive then, as
    recorded; what the keeper accounted for (None: not reached or not believed, ``refused``
    says why when it was reached)."""

    processes: tuple[RecordedProcess, ...] = ()
    account: Account | None = None
    refused: str | None = None


def stop_kept(record: Path, run_id: str) -> KeptStop:
    """Stop what a dead driver's keeper still keeps (see the module's doc), and say what was
    alive of it and what its keeper accounted for."""
    fields, processes = read_record(record)
    alive = tuple(p for p in processes if still_recorded(p))
    if not alive:
        return KeptStop()
    keeper = next((p for p in alive if p.pid == fields.get("keeper")), None)
    reached = reach_keeper(record, run_id, next_generation([recorded_generation(record)])) if keeper else None
    told = False
    if keeper is not None and reached is not None and reached.refused is None:
        answer = keeper_socket.ask(keeper_socket.address(keeper.pid, keeper.started),
                                   {"t": "drain", "generation": next_generation([recorded_generation(record)])},
                                   pid=keeper.pid)
        told = answer is not None and answer.get("t") == "draining"
    if keeper is not None and (told or signal_recorded(keeper, signal.SIGTERM)):
        deadline_at = time.monotonic() + float(fields.get("grace_s") or 0.0) + _SWEEP_ALLOWANCE_S
        while still_recorded(keeper) and time.monotonic() < deadline_at:
            time.sleep(_POLL_S)
    stop_recorded(record)
    return KeptStop(alive, None if reached is None else reached.account, None if reached is None else reached.refused)


class AdoptedKeeper:
    """A new driver's end of a keeper it took over (``resume``): its reports, commands and signal
    frames, as over a spawner's pipes (:mod:`elastic.node.spawner.messages`), the ranks it kept
    (attempt, rank, pid), and how each was started (``commands``, by pid: its argv, environment,
    working directory, log path, attempt and rank, as the spawn request said them).

    It is a :class:`elastic.node.spawner.link.SpawnerProcess` too (``pid``, ``stdin``, ``stdout``,
    ``poll``, ``wait``, ``kill``), so that a supervisor drives it as a spawner it started
    (:meth:`elastic.node.supervisor.ProcessSupervisor.adopt`).
    """

    def __init__(
        self, pid: int, link: socket.socket, reader: BinaryIO, signals: socket.socket, ranks: tuple[KeptRank, ...],
        generation: int, commands: Mapping[int, Mapping[str, Any]], exits: tuple[KeptExit, ...] = (),
    ) -> None:
        self._link = link
        self._signals = signals
        self._reader = reader  # the link's reports, buffered: what came with the answer to resume too
        self.ranks = ranks  # alive at the takeover, and ended while no driver was there (``exits``)
        self.exits = exits
        self.generation = generation
        self.commands = commands
        self.pid = pid
        self.stdin: _LinkWriter | None = _LinkWriter(link)
        self.stdout: BinaryIO | None = reader

    def account(self, node: str) -> Account:
        """What it kept, as the takeover's reading reads it (:func:`elastic.core.takeover.reading.read_account`)."""
        return Account(node, self.ranks, self.exits)

    def alive(self) -> frozenset[int]:
        """The pids of its ranks that had not ended at the takeover."""
        return frozenset(r.pid for r in self.ranks) - {e.pid for e in self.exits}

    def take_signal_fd(self) -> int:
        """The signal frames' connection as a descriptor the caller owns (and closes)."""
        return self._signals.detach()

    def poll(self) -> int | None:
        """None while the keeper runs; 0 once it is gone (not our child: its status is not ours to read)."""
        return None if os.path.exists(f"/proc/{self.pid}") and _running(self.pid) else 0

    def wait(self, timeout: float | None = None) -> int:
        deadline_at = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline_at is not None and time.monotonic() >= deadline_at:
                raise subprocess.TimeoutExpired(f"keeper pid {self.pid}", timeout or 0.0)
            time.sleep(_POLL_S)
        return 0

    def kill(self) -> None:
        keeper = identify(self.pid)
        if keeper is not None:
            signal_recorded(keeper, signal.SIGKILL)

    def read_report(self, timeout_s: float | None = None) -> dict[str, Any] | None:
        """The keeper's next report (``exit``, ``swept``...); None once it is gone. A ``timeout_s``
        that passes raises ``TimeoutError`` and leaves the link unusable."""
        self._link.settimeout(timeout_s)
        return read_message(self._reader)

    def send_signal(self, op: int, pid: int, signum: int) -> None:
        self._signals.sendall(SIGNAL_FRAME.pack(op, pid, signum))

    def release(self) -> None:
        """End it on purpose: it sweeps and exits at once, as a driver's clean end does."""
        try:
            keeper_socket.send(self._link, {"t": "release"})
        except OSError:
            pass
        self.close()

    def drain(self, grace_s: float) -> None:
        """Stop its ranks as a drain does and end it, over the link, while it still serves this
        driver (a keeper let go first would keep them for a new lease): SIGTERM to every rank,
        up to ``grace_s`` for them to end, SIGKILL to the rest, then the release (its sweep and
        exit), waited for."""
        alive = set(self.alive())
        deadline_at = time.monotonic() + grace_s
        try:
            self.send_signal(OP_SIGNAL_ALL, 0, signal.SIGTERM)
            while alive and (left_s := deadline_at - time.monotonic()) > 0:
                report = self.read_report(timeout_s=left_s)
                if report is None:
                    break
                if report.get("t") == "exit":
                    alive.discard(int(report["pid"]))
        except (OSError, TimeoutError):
            pass  # the grace is over, or the keeper is gone
        try:
            if alive:
                self.send_signal(OP_SIGNAL_ALL, 0, signal.SIGKILL)
        except OSError:
            pass
        self.release()
        try:
            self.wait(_SWEEP_ALLOWANCE_S)
        except subprocess.TimeoutExpired:
            self.kill()

    def close(self) -> None:
        """Let go of it without a release: a loss, after which it keeps its ranks for a new lease."""
        if self.stdin is not None:
            self.stdin.close()
        self._reader.close()
        self._link.close()
        self._signals.close()

    def specs(self, node_id: str) -> dict[int, WorkerSpec]:
        """Each kept rank's spec (by pid) as its spawn request made it: its command, environment,
        working directory and log path (the policies a driver adds are its own)."""
        return {
            pid: WorkerSpec(
                attempt=int(command["attempt"]), rank=int(command["rank"]),
                local_rank=int(command["env"].get("LOCAL_RANK", 0)), node_id=node_id,
                argv=tuple(command["argv"]), env=dict(command["env"]), log_path=str(command["log_path"]),
                cwd=command.get("cwd"),
            )
            for pid, command in self.commands.items()
        }


class _LinkWriter:
    """The link's command side as a file: writes go to the socket whole; closing it shuts the
    socket's sending side, which the keeper reads as the end of its commands."""

    def __init__(self, link: socket.socket) -> None:
        self._link = link
        self.closed = False

    def write(self, data: bytes, /) -> int:
        if self.closed:
            raise ValueError("write to a closed link")
        self._link.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._link.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # gone already


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return False
    return text[text.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def resume_keeper(record: Path, run_id: str) -> AdoptedKeeper | str:
    """Take over the keeper ``record`` names under the next generation: its link, or why not."""
    generation = next_generation([recorded_generation(record)])
    reached = reach_keeper(record, run_id, generation)
    if reached is None:
        return f"{record} names no live keeper"
    if reached.refused is not None:
        return reached.refused
    name = keeper_socket.address(reached.keeper.pid, reached.keeper.started)
    link = _resumed(name, "link", generation, reached.keeper.pid)
    if isinstance(link, str):
        return link
    conn, reader, answer = link
    signals = _resumed(name, "signals", generation, reached.keeper.pid)
    if isinstance(signals, str):
        reader.close()
        conn.close()
        return signals
    signals[1].close()
    ranks = tuple(KeptRank(int(a), int(r), int(pid)) for a, r, pid in answer["ranks"])
    exits = tuple(KeptExit(int(pid), int(code), float(at)) for pid, code, at in answer.get("exits") or ())
    commands = {int(pid): dict(command) for pid, command in (answer.get("commands") or {}).items()}
    return AdoptedKeeper(reached.keeper.pid, conn, reader, signals[0], ranks, generation, commands, exits)


def _resumed(name: str, channel: str, generation: int, pid: int) -> tuple[socket.socket, BinaryIO, dict[str, Any]] | str:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    conn.settimeout(5.0)
    reader = conn.makefile("rb")
    try:
        conn.connect(name)
        if not keeper_socket.same_user(conn, pid):
            raise OSError(f"the socket is not pid {pid}'s, or not its user's")
        keeper_socket.send(conn, {"t": "resume", "channel": channel, "generation": generation})
        answer = read_message(reader)
    except OSError as error:
        reader.close()
        conn.close()
        return f"the keeper at {name[1:]} did not answer: {error}"
    if answer is None or answer.get("t") != "resumed":
        reader.close()
        conn.close()
        return f"the keeper refused generation {generation}: it serves generation {(answer or {}).get('generation')}"
    conn.settimeout(None)
    return conn, reader, answer
