"""Which compilation cache a rank's JAX uses, noted at its first compile for the launcher to compare.

Loaded by the rank bootstrap (``sitecustomize.py`` beside it) once the rank has
imported ``jax._src.compilation_cache``, never before; standard library only, and
it imports nothing of elastic (a rank's environment need not have elastic).

elastic hands each rank a cache kept across attempts (``JAX_COMPILATION_CACHE_DIR``
under ``--cache-dir``), but a program can replace it after it starts:
``jax.config.update("jax_compilation_cache_dir", ...)`` or
``compilation_cache.set_cache_dir(...)`` (MaxText does with its ``jax_cache_dir``,
default ``~/jax_cache``), its own ``JAX_COMPILATION_CACHE_DIR`` set before it
imports JAX, or the cache turned off. JAX decides once a process, at its first
compile, whether and where it caches, and says so through its monitoring events
(``tasks_using_cache`` or ``task_disabled_cache``). :func:`on_compilation_cache`
listens for that event (``jax.monitoring``'s ``register_event_listener``) and writes
what JAX then has to ``rank-R.jax-cache.json`` beside the rank's heartbeat file
(:func:`note_path`). The launcher reads it after the attempt and says once if
the cache is not the one it handed over (``elastic.core.launch.compile_caches``).

A note is written only under ``elastic run`` (``ELASTIC_HEARTBEAT_FILE`` and
``RANK`` set), once a process, and nothing here ever raises into JAX's compile.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

__all__ = ["NOTE_SUFFIX", "note_path", "on_compilation_cache"]

NOTE_SUFFIX = ".jax-cache.json"
# JAX records one of these once a process, when its first compile asks whether the cache is used.
_FIRST_COMPILE = frozenset({"/jax/compilation_cache/tasks_using_cache", "/jax/compilation_cache/task_disabled_cache"})


def note_path(env: Mapping[str, str]) -> str | None:
    """``attempt-K/rank-R.jax-cache.json`` in the run directory, beside the heartbeat file; None outside elastic."""
    heartbeat, rank = env.get("ELASTIC_HEARTBEAT_FILE"), env.get("RANK")
    if not heartbeat or not rank:
        return None
    return os.path.join(os.path.dirname(heartbeat), f"rank-{rank}{NOTE_SUFFIX}")


def on_compilation_cache(module: ModuleType) -> None:
    """Listen, through JAX's monitoring events, for the first compile of this process."""
    config, monitoring = getattr(module, "config", None), getattr(module, "monitoring", None)
    register = getattr(monitoring, "register_event_listener", None)
    if config is None or register is None:
        return  # another JAX: no note, and nothing else changes
    noted: list[str] = []

    def listen(event: str, **_: Any) -> None:
        if noted or event not in _FIRST_COMPILE:
            return
        noted.append(event)
        try:
            _write(config, event)
        except Exception:  # noqa: BLE001 - a note never fails a compile
            pass

    register(listen)


def _write(config: Any, event: str) -> None:
    path = note_path(os.environ)
    if path is None:
        return
    import json

    note = {
        "jax_compilation_cache_dir": config.compilation_cache_dir.value,
        "enabled": event.endswith("/tasks_using_cache"),
        "variable": os.environ.get("JAX_COMPILATION_CACHE_DIR"),  # the process's own, at that moment
        "maxtext": "maxtext" in sys.modules or "MaxText" in sys.modules,
    }
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:  # as run files are
        json.dump(note, out)
    os.replace(temporary, path)
