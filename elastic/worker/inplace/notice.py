"""The launcher's word to a rank that a generation of its process group is over (standard library only).

When ranks are lost, the launcher writes each survivor's notice file (the path in
``ELASTIC_INPLACE_NOTICE``), whole: a temporary file renamed, as the preemption
notice is written. It is a JSON object: ``generation`` (the number of the
generation to join), ``rank`` and ``world_size`` in it, and ``store``
(``host:port`` of the launcher's ``TCPStore`` that the generation rendezvouses
on, under its own prefix). A rank that starts into a generation (the first, or a
replacement started into a later one) reads the same four things from its variables
(:func:`first_notice`). A warm spare (``ELASTIC_INPLACE_SPARE=1``) starts with no place: it
runs the script up to its generations and waits there for the notice file that hands it a
lost rank's place (:func:`is_spare`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass

__all__ = [
    "GENERATION_VAR",
    "NOTICE_VAR",
    "SPARE_VAR",
    "STORE_VAR",
    "Notice",
    "first_notice",
    "is_spare",
    "read_notice",
    "ready_path",
    "say_ready",
    "store_prefix",
    "write_notice",
]

NOTICE_VAR = "ELASTIC_INPLACE_NOTICE"
STORE_VAR = "ELASTIC_INPLACE_STORE"
GENERATION_VAR = "ELASTIC_INPLACE_GENERATION"
SPARE_VAR = "ELASTIC_INPLACE_SPARE"
_MAX_NOTICE_READ = 65536  # a place and the variables of a rank handed with it


@dataclass(frozen=True)
class Notice:
    """A generation of the process group as one rank joins it."""

    generation: int
    rank: int
    world_size: int
    store: str  # host:port
    # A spare handed a lost rank's place takes on its variables (RANK, LOCAL_RANK, its heartbeat,
    # error and start-up files...), so its launcher reads it as that rank; a survivor's is empty.
    identity: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.generation < 0 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"no such place in a world: {self}")
        host, _, port = self.store.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"the store must be host:port, not {self.store!r}")

    @property
    def store_host(self) -> str:
        return self.store.rpartition(":")[0]

    @property
    def store_port(self) -> int:
        return int(self.store.rpartition(":")[2])


def store_prefix(generation: int) -> str:
    """The keys of one generation in the launcher's store: none of a dead one meets the next."""
    return f"elastic/generation/{generation}/"


def is_spare(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a warm spare, waiting for its place in its notice file."""
    env = os.environ if env is None else env
    return env.get(SPARE_VAR) == "1" and bool(env.get(STORE_VAR)) and bool(env.get(NOTICE_VAR))


def first_notice(env: Mapping[str, str] | None = None) -> Notice | None:
    """The generation a rank starts into, from its variables (``ELASTIC_INPLACE_STORE``,
    ``ELASTIC_INPLACE_GENERATION``, default 0, ``RANK``, ``WORLD_SIZE``); ``None`` where the
    launcher did not ask for in-place restarts (no store given)."""
    env = os.environ if env is None else env
    store = env.get(STORE_VAR)
    if not store:
        return None
    try:
        return Notice(int(env.get(GENERATION_VAR, "0")), int(env["RANK"]), int(env["WORLD_SIZE"]), store)
    except (KeyError, ValueError) as error:
        raise ValueError(f"{STORE_VAR} is set but the rank's place is not: {error}") from None


def read_notice(path: str) -> Notice | None:
    """The notice at ``path``; ``None`` while there is none or it cannot be read whole."""
    try:
        with open(path, encoding="utf-8") as file:
            fields = json.loads(file.read(_MAX_NOTICE_READ))
        identity = tuple((str(name), str(value)) for name, value in fields.get("identity") or ())
        return Notice(int(fields["generation"]), int(fields["rank"]), int(fields["world_size"]), str(fields["store"]),
                      identity)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ready_path(notice_path: str) -> str:
    """Where a warm spare says it waits for its place: beside its notice file."""
    return f"{notice_path}.ready"


def say_ready(notice_path: str) -> None:
    """A warm spare waits for its place now (imports done, model built): its pid, written whole
    beside its notice file, read by its node (never an error: a spare that cannot say so still waits)."""
    path = ready_path(notice_path)
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(f"{os.getpid()}\n")
        os.replace(temporary, path)
    except OSError:
        pass


def write_notice(path: str, notice: Notice) -> None:
    """Write ``notice`` at ``path`` whole: a reader sees the old file or the new one, never half."""
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(asdict(notice), file)
    os.replace(temporary, path)
