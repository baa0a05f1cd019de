"""Where a rank's start-up goes: wall-clock marks written to its ``ELASTIC_STARTUP_FILE``.

Loaded by the rank bootstrap (``sitecustomize.py`` beside it) at start-up and
when a rank imports one of the modules below, never before; standard library
only, and it imports nothing of elastic (a rank's environment need not have it).

Each line of the file is one JSON object, ``{"mark": NAME, "time": WALL, "pid": PID}``
(and ``seconds`` for ``cache_load``), appended with one ``write``:

- ``interpreter``: the bootstrap ran in a new rank interpreter (a warm one,
  ``--prewarm``, writes it when it is handed its rank instead);
- ``init_begin``, ``init_end``: around the first distributed initialisation,
  ``jax.distributed.initialize`` (:func:`on_jax_distributed`) or torch's
  ``init_process_group`` (:func:`on_torch_c10d`), written even when it raises;
- ``restore_begin``, ``restore_end``: around the first checkpoint restore, Orbax's
  ``CheckpointManager.restore`` (:func:`on_orbax_manager`) or
  ``torch.distributed.checkpoint.load`` (:func:`on_torch_dcp_loader`);
- ``cache_load``: the seconds JAX has spent so far reading compiled programs from its
  persistent compilation cache (its ``cache_retrieval_time_sec`` event), the running
  total written at each read (:func:`on_compilation_cache`).

Each mark but ``cache_load`` is written once a process, and only when the
variable is set: a warm interpreter (``--prewarm``) has no rank yet and writes
nothing until it has. The launcher reads the marks of the file's first process
(a child the rank starts inherits the variable) when it sees the rank's first
step (``elastic.core.training.startup``). Nothing here ever raises into the rank.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = [
    "STARTUP_FILE_VAR",
    "mark",
    "on_compilation_cache",
    "on_jax_distributed",
    "on_orbax_manager",
    "on_torch_c10d",
    "on_torch_dcp_loader",
]

STARTUP_FILE_VAR = "ELASTIC_STARTUP_FILE"
_CACHE_RETRIEVAL = "/jax/compilation_cache/cache_retrieval_time_sec"
_written: set[str] = set()
_cache_load_s: list[float] = [0.0]


def mark(name: str, *, again: bool = False, **extra: float) -> None:
    """Append the mark ``name`` (now, wall clock) to the rank's startup file: once a process,
    unless ``again``; nothing outside ``elastic run``, and never an error."""
    if name in _written and not again:
        return
    path = os.environ.get(STARTUP_FILE_VAR)
    if not path:
        return
    _written.add(name)
    try:
        line = json.dumps({"mark": name, "time": time.time(), "pid": os.getpid(), **extra}) + "\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except Exception:  # noqa: BLE001 - a mark never fails the rank
        pass


def _timed(function: Callable[..., Any], begin: str, end: str) -> Callable[..., Any]:
    """``function``, its first call marked ``begin`` and ``end`` (the end written even when it raises)."""
    if getattr(function, "_elastic_timed", False):
        return function

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        if begin in _written:
            return function(*args, **kwargs)
        mark(begin)
        try:
            return function(*args, **kwargs)
        finally:
            mark(end)

    timed._elastic_timed = True  # type: ignore[attr-defined]
    return timed


def _wrap(owner: Any, name: str, begin: str, end: str) -> None:
    function = getattr(owner, name, None)
    if callable(function):
        setattr(owner, name, _timed(function, begin, end))


def on_jax_distributed(module: ModuleType) -> None:
    """Mark ``jax.distributed.initialize`` (``jax.distributed`` imports it from this module after)."""
    _wrap(module, "initialize", "init_begin", "init_end")


def on_torch_c10d(module: ModuleType) -> None:
    """Mark ``init_process_group`` (``torch.distributed`` imports it from this module after)."""
    _wrap(module, "init_process_group", "init_begin", "init_end")


def on_orbax_manager(module: ModuleType) -> None:
    """Mark Orbax's ``CheckpointManager.restore``."""
    _wrap(getattr(module, "CheckpointManager", None), "restore", "restore_begin", "restore_end")


def on_torch_dcp_loader(module: ModuleType) -> None:
    """Mark ``torch.distributed.checkpoint.load`` (its package imports it from this module after)."""
    _wrap(module, "load", "restore_begin", "restore_end")


def on_compilation_cache(module: ModuleType) -> None:
    """Total the seconds JAX spends reading its persistent compilation cache."""
    register = getattr(getattr(module, "monitoring", None), "register_event_duration_secs_listener", None)
    if register is None:
        return

    def listen(event: str, duration: float, **_: Any) -> None:
        if event != _CACHE_RETRIEVAL:
            return
        try:
            _cache_load_s[0] += float(duration)
            mark("cache_load", again=True, seconds=_cache_load_s[0])
        except Exception:  # noqa: BLE001 - a mark never fails a compile
            pass

    register(listen)
