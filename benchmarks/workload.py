"""A torch-free rank for the launcher benchmark: lockstep steps over a TCP barrier, timestamped.

Every rank runs ``BENCH_STEPS`` steps of ``BENCH_STEP_TIME`` seconds and meets
the others at a barrier after each one. Rank 0 hosts the barrier at
``MASTER_ADDR:MASTER_PORT``; the others connect to it. A rank that loses its
barrier connection exits at once with a non-zero code, as a NCCL rank would.

The rank appends one JSON line per event to the file named by ``BENCH_EVENTS``
(``started``, ``first_step``, ``sigterm``, ``killed``), each with the rank, the attempt
(``TORCHELASTIC_RESTART_COUNT``), its pid and a wall-clock time. On attempt 0
rank ``BENCH_KILL_RANK`` (default: the last) SIGKILLs itself at the first step
boundary ``BENCH_KILL_AFTER`` seconds after it started; unset means no kill.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from types import FrameType

CONNECT_TIMEOUT_S = 30.0
CONNECT_RETRY_S = 0.02
BARRIER_TIMEOUT_S = 60.0
EXIT_ON_SIGTERM = 128 + signal.SIGTERM
EXIT_PEER_LOST = 1


class PeerLostError(Exception):
    """The barrier lost a connection, or never got one."""


@dataclass(frozen=True)
class Config:
    """What this rank was told by its launcher and by the benchmark."""

    rank: int
    world_size: int
    attempt: int
    master_addr: str
    master_port: int
    events_path: str
    steps: int
    step_time_s: float
    kill_after_s: float | None
    kill_rank: int


def read_config(env: dict[str, str]) -> Config:
    """Read the rank and benchmark variables."""
    world_size = int(env["WORLD_SIZE"])
    kill_after = env.get("BENCH_KILL_AFTER")
    return Config(
        rank=int(env["RANK"]),
        world_size=world_size,
        attempt=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        master_addr=env["MASTER_ADDR"],
        master_port=int(env["MASTER_PORT"]),
        events_path=env["BENCH_EVENTS"],
        steps=int(env.get("BENCH_STEPS", "10")),
        step_time_s=float(env.get("BENCH_STEP_TIME", "0.5")),
        kill_after_s=float(kill_after) if kill_after else None,
        kill_rank=int(env.get("BENCH_KILL_RANK", str(world_size - 1))),
    )


class EventLog:
    """Appends this rank's events to the shared file, one write per line."""

    def __init__(self, path: str, rank: int, attempt: int) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._rank = rank
        self._attempt = attempt

    def emit(self, event: str) -> None:
        """Record that the event happened now."""
        record = {
            "ev": event,
            "rank": self._rank,
            "attempt": self._attempt,
            "pid": os.getpid(),
            "t": time.time(),
        }
        os.write(self._fd, (json.dumps(record) + "\n").encode())


def exit_on_sigterm(events: EventLog) -> None:
    """On SIGTERM, record it and exit 143 right away."""

    def handler(signum: int, frame: FrameType | None) -> None:
        events.emit("sigterm")
        os._exit(EXIT_ON_SIGTERM)

    signal.signal(signal.SIGTERM, handler)


def new_socket() -> socket.socket:
    """Make an IPv4 TCP socket with Nagle off and a bounded wait on every call."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(BARRIER_TIMEOUT_S)
    return sock


def accept_peers(addr: str, port: int, count: int) -> list[socket.socket]:
    """Listen at addr:port and accept one connection from each of count peers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((addr, port))
    listener.listen(count)
    listener.settimeout(CONNECT_TIMEOUT_S)
    peers: list[socket.socket] = []
    try:
        for _ in range(count):
            conn, _ = listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(BARRIER_TIMEOUT_S)
            peers.append(conn)
    except OSError as exc:
        raise PeerLostError(f"waiting for {count} peers at {addr}:{port}: {exc}") from exc
    finally:
        listener.close()
    return peers


def connect_to_host(addr: str, port: int) -> socket.socket:
    """Connect to rank 0, retrying until it listens or the deadline passes."""
    deadline_at = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        sock = new_socket()
        try:
            sock.connect((addr, port))
        except OSError as exc:
            sock.close()
            if time.monotonic() >= deadline_at:
                raise PeerLostError(f"connecting to {addr}:{port}: {exc}") from exc
            time.sleep(CONNECT_RETRY_S)
        else:
            return sock


def receive_byte(sock: socket.socket) -> None:
    """Wait for one byte; a closed or broken connection is a lost peer."""
    try:
        data = sock.recv(1)
    except OSError as exc:
        raise PeerLostError(str(exc)) from exc
    if not data:
        raise PeerLostError("connection closed by the other side")


def send_byte(sock: socket.socket) -> None:
    """Send one byte; a broken connection is a lost peer."""
    try:
        sock.sendall(b".")
    except OSError as exc:
        raise PeerLostError(str(exc)) from exc


class Barrier:
    """Rank 0 holds a connection to every peer; each peer holds one to rank 0."""

    def __init__(self, sockets: list[socket.socket], is_host: bool) -> None:
        self._sockets = sockets
        self._is_host = is_host

    @classmethod
    def join(cls, config: Config) -> Barrier:
        """Host the barrier on rank 0, connect to it elsewhere."""
        if config.rank == 0:
            peers = accept_peers(config.master_addr, config.master_port, config.world_size - 1)
            return cls(peers, is_host=True)
        return cls([connect_to_host(config.master_addr, config.master_port)], is_host=False)

    def wait(self) -> None:
        """Return once every rank has arrived: peers report in, the host releases them."""
        if self._is_host:
            for peer in self._sockets:
                receive_byte(peer)
            for peer in self._sockets:
                send_byte(peer)
        else:
            send_byte(self._sockets[0])
            receive_byte(self._sockets[0])

    def close(self) -> None:
        """Close every connection."""
        for sock in self._sockets:
            sock.close()


def should_kill(config: Config, elapsed_s: float) -> bool:
    """Whether this rank is the victim and its time has come (attempt 0 only)."""
    return (
        config.attempt == 0
        and config.rank == config.kill_rank
        and config.kill_after_s is not None
        and elapsed_s >= config.kill_after_s
    )


def run_steps(config: Config, events: EventLog, barrier: Barrier, started_at: float) -> None:
    """Step in lockstep with the other ranks, dying on schedule if this is the victim."""
    for step in range(1, config.steps + 1):
        if should_kill(config, time.monotonic() - started_at):
            events.emit("killed")
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(config.step_time_s)
        barrier.wait()
        if step == 1:
            events.emit("first_step")


def main() -> int:
    """Run this rank to the end, or exit non-zero as soon as a peer is lost."""
    started_at = time.monotonic()
    config = read_config(dict(os.environ))
    events = EventLog(config.events_path, config.rank, config.attempt)
    exit_on_sigterm(events)
    events.emit("started")
    try:
        barrier = Barrier.join(config)
        run_steps(config, events, barrier, started_at)
    except PeerLostError as exc:
        print(f"rank {config.rank}: barrier peer lost: {exc}", file=sys.stderr, flush=True)
        return EXIT_PEER_LOST
    barrier.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
