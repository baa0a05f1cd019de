"""A rank's own account of its end: the stop signals its handlers caught, JAX's preemption sync,
the exception that ended its script.

A rank that catches SIGTERM, saves and exits 0 looks, by its exit status, like a
rank that finished. The launcher knows the signals it sent itself (it sends them
only to drain an attempt); this module tells it of the others. It is loaded by
the rank bootstrap (``sitecustomize.py`` beside it) only when a rank installs a
Python handler for SIGTERM, SIGINT, SIGHUP or SIGUSR1, or imports
``jax.experimental.multihost_utils``; standard library only, and it imports
nothing of elastic (a rank's environment need not have it).

- :func:`watched`: the handler ``signal.signal`` installs in its place. Installed,
  it appends a line saying so (``{"installed": 15, ...}``: the node then knows the
  rank's own handler, not only a native one such as JAX's, may hold the signal, and
  leaves a failure's survivor its grace to exit). When it runs it first appends one
  line to the rank's ``ELASTIC_SIGNALS_FILE`` (the signal, the handler, whether the
  interpreter was already exiting), then calls the rank's handler;
  ``signal.getsignal`` still returns the rank's own.
- :func:`on_multihost_utils`: JAX's ``reached_preemption_sync_point``, which
  Orbax's ``CheckpointManager.reached_preemption`` and MaxText call through the
  module, writes a line the first time it answers true. JAX catches SIGTERM in
  C++ after ``jax.distributed.initialize()``, where no Python handler sees it;
  its sync point is where a JAX program learns of it.
- :func:`on_uncaught`: called by the bootstrap's ``sys.excepthook`` (which then calls
  the hook before it: Python's, or whichever a framework put there) with the exception
  the interpreter could not hand to any ``except``: the one that ended the script,
  whatever the rank prints around it or after it.

Only the rank's own interpreter writes: a child that inherits a handler by
``fork`` (a data loader worker its parent SIGTERMs at shutdown) or is started
by the rank with its environment (which carries :data:`OWNER_VAR` once the rank
installs a handler, or sets an excepthook) writes nothing. A signal is written at
each catch at least a second after the one written before it (a stop is judged by
the latest), the sync point and the exception once, each as one ``write`` of a line
to a file opened for appending. What the lines mean is the launcher's to judge
(``elastic.core.evidence.read_account``, ``elastic.core.rank_ends.stop_sign_in``).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any

__all__ = [
    "ENTRY_NAMES", "OWNER_VAR", "SIGNALS_FILE_VAR", "at_exit", "handler_name", "on_multihost_utils", "on_uncaught",
    "watched",
]

SIGNALS_FILE_VAR = "ELASTIC_SIGNALS_FILE"
# The pid of the rank's own interpreter, set in its environment once it installs a handler,
# so that the Python processes it starts know they are not it.
OWNER_VAR = "_ELASTIC_SIGNALS_PID"
# The outermost frame of a main thread still running the rank's script (python SCRIPT, -m, -c).
ENTRY_NAMES = frozenset({"<module>", "_run_module_as_main", "_run_code", "run_module", "run_path"})

owner: int | None = None  # the rank's own pid, as the bootstrap found it at start-up; None: a child
_written: dict[str, float] = {}
# A signal caught again within this many seconds is not written again: a stop is judged by its
# latest catch, to the second, and a handler run in a loop cannot fill the disk.
_REWRITE_AFTER_S = 1.0
_SHOWN_CHARS = 500


def _write(kind: str, entry: dict[str, Any], *, once: bool = True) -> None:
    """Append ``entry`` to the rank's signals file: once per ``kind`` in this process, or, not
    ``once``, again at each occurrence at least a second after the last one written."""
    if owner is None or os.getpid() != owner:
        return
    now = time.time()
    last = _written.get(kind)
    if last is not None and (once or now - last < _REWRITE_AFTER_S):
        return
    path = os.environ.get(SIGNALS_FILE_VAR)
    if not path:
        return
    _written[kind] = now
    line = json.dumps({**entry, "time": round(now, 3), "pid": os.getpid()}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def at_exit(frame: FrameType | None) -> bool:
    """Whether the main thread, interrupted at ``frame``, had left the rank's script: an at-exit
    handler, the wait for non-daemon threads, finalization (or no Python frame at all)."""
    if frame is None or sys.is_finalizing():
        return True
    while frame.f_back is not None:
        frame = frame.f_back
    return frame.f_code.co_name not in ENTRY_NAMES


def handler_name(handler: Callable[..., Any]) -> str:
    """``save (train.py:12)``: a handler's name and where it is defined, as a stack dump says it."""
    function = getattr(handler, "__func__", handler)
    code = getattr(function, "__code__", None)
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None) or type(handler).__name__
    if code is None:
        return str(name)
    return f"{name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"


def watched(signum: int, handler: Callable[[int, FrameType | None], Any]) -> Callable[[int, FrameType | None], Any]:
    """The handler to install for ``signum`` in the place of the rank's ``handler``."""
    if owner is not None and os.getpid() == owner:
        os.environ.setdefault(OWNER_VAR, str(owner))
    try:
        installed = _signal_name(signum)
        _write(f"installed {installed}", {"installed": int(signum), "name": installed, "handler": handler_name(handler)})
    except Exception:  # never in the way of the rank's handler
        pass

    def on_signal(number: int, frame: FrameType | None) -> Any:
        try:
            name = _signal_name(number)
            _write(name, {"signal": int(number), "name": name, "handler": handler_name(handler),
                          "at_exit": at_exit(frame)}, once=False)
        except Exception:  # never in the way of the rank's own handler
            pass
        return handler(number, frame)

    on_signal._elastic_handler = handler  # type: ignore[attr-defined]  # what signal.getsignal gives back
    return on_signal


def on_uncaught(kind: type[BaseException], value: BaseException) -> None:
    """Write the exception the interpreter hands ``sys.excepthook``: the one that ended the
    rank's script (``OSError: [Errno 28] No space left on device``), whatever its output shows."""
    try:
        text = "".join(traceback.format_exception_only(kind, value)).strip().splitlines()
        line = text[-1] if text else kind.__name__
        _write("uncaught", {"uncaught": line[:_SHOWN_CHARS]})
    except Exception:  # never in the way of the interpreter's own report
        pass


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def on_multihost_utils(module: ModuleType) -> None:
    """Make JAX's ``reached_preemption_sync_point`` write its first true answer."""
    original = getattr(module, "reached_preemption_sync_point", None)
    if original is None or getattr(original, "_elastic_wrapped", False):
        return

    @functools.wraps(original)
    def reached_preemption_sync_point(step_id: int) -> bool:
        reached: bool = original(step_id)
        if reached:
            try:
                _write("preemption_sync", {"preemption_sync": int(step_id)})
            except Exception:  # never in the way of the rank's save
                pass
        return reached

    reached_preemption_sync_point._elastic_wrapped = True  # type: ignore[attr-defined]
    module.reached_preemption_sync_point = reached_preemption_sync_point  # type: ignore[attr-defined]
