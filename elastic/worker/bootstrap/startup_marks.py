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
  total written at each read (:func:`on_compilation_cache`);
- ``imports``: with ``init_begin`` and ``restore_begin``, what the rank has imported by
  then from its installed packages (``modules``: the packages whose files lie in a
  ``site-packages`` or ``dist-packages`` folder of ``sys.path`` and their modules one
  level down, ``torch`` and ``torch._dynamo``, in the order they were first imported)
  and its resident memory (``resident_kb``), written again only when the list grew
  (:func:`imported_modules`). The launcher prewarms the rank's next process with them
  (``--prewarm-memory``).

- ``inplace``: the rank runs its training loop on ``elastic.worker.inplace``
  (:data:`INPLACE_MARK`, written as its generations begin): it can re-form in place,
  and its node may start the warm spares of ``--spares``.

Each mark but ``cache_load`` is written once a process, and only when the
variable is set: a warm interpreter (``--prewarm``) has no rank yet and writes
nothing until it has. The launcher reads the marks of the file's first process
(a child the rank starts inherits the variable) when it sees the rank's first
step (``elastic.core.training.startup``), and, for the rank's warm successor, until
the rank is past its start-up (``init_end`` is one sign: ``elastic.core.launch.prewarm_due``).
Nothing here ever raises into the rank, and an exception a marked call raises reaches the rank
with no frame of this module in its traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from types import CodeType, FrameType, ModuleType, TracebackType
from typing import Any

__all__ = [
    "INPLACE_MARK",
    "STARTUP_FILE_VAR",
    "imported_modules",
    "mark",
    "on_compilation_cache",
    "on_jax_distributed",
    "on_orbax_manager",
    "on_torch_c10d",
    "on_torch_dcp_loader",
]

STARTUP_FILE_VAR = "ELASTIC_STARTUP_FILE"
INPLACE_MARK = "inplace"  # the rank runs on elastic.worker.inplace (written by its generations)
_CACHE_RETRIEVAL = "/jax/compilation_cache/cache_retrieval_time_sec"
_written: set[str] = set()
_cache_load_s: list[float] = [0.0]
_IMPORTS_AT = ("init_begin", "restore_begin")  # the marks that take note of the imports too
_imports_noted: list[int] = [0]  # how many packages the last ``imports`` record named
_NOT_PREWARMED = frozenset({"elastic", "sitecustomize", "usercustomize", "__main__"})


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
        _append(path, {"mark": name, "time": time.time(), "pid": os.getpid(), **extra})
        if name in _IMPORTS_AT:
            _note_imports(path)
    except Exception:  # noqa: BLE001 - a mark never fails the rank
        pass


def _append(path: str, entry: dict[str, Any]) -> None:
    line = json.dumps(entry) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _note_imports(path: str) -> None:
    """The ``imports`` record, when the rank has imported more modules than it last said."""
    modules = imported_modules()
    if len(modules) <= _imports_noted[0]:
        return
    _imports_noted[0] = len(modules)
    _append(path, {"mark": "imports", "time": time.time(), "pid": os.getpid(),
                   "modules": modules, "resident_kb": _resident_kb()})


def imported_modules() -> list[str]:
    """What this interpreter has imported from its installed packages, first import first: each
    package whose files lie in a ``site-packages`` or ``dist-packages`` folder on ``sys.path``
    (not the standard library, not the script's own modules, not an editable checkout, not
    elastic's, not a private ``_name``), and its modules one level down.

    One level down because a package's own import often leaves out what the rank imports next:
    ``import torch`` loads no ``torch._dynamo`` (a second of CPU), ``import orbax`` (a
    namespace) no ``orbax.checkpoint``; deeper modules are what those import themselves."""
    roots = tuple(
        os.path.join(entry, "") for entry in sys.path
        if os.path.basename(entry.rstrip(os.sep)) in ("site-packages", "dist-packages")
    )
    if not roots:
        return []
    installed: dict[str, bool] = {}
    modules = []
    for name in list(sys.modules):
        top, _, rest = name.partition(".")
        if "." in rest:
            continue
        if top not in installed:
            module = sys.modules.get(top)
            where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", None) or ()), None)
            installed[top] = (
                not top.startswith("_") and top not in _NOT_PREWARMED
                and isinstance(where, str) and where.startswith(roots)
            )
        if installed[top]:
            modules.append(name)
    return modules


def _resident_kb() -> int:
    """This process's resident memory, KiB (``/proc/self/statm``; 0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


def _timed(function: Callable[..., Any], begin: str, end: str) -> Callable[..., Any]:
    """``function``, its first call marked ``begin`` and ``end`` (the end written even when it raises).

    An exception ``function`` raises reaches the caller as if the caller had called it directly:
    the wrapper takes its own entry out of the traceback (:func:`_leave_traceback`), so the
    rank's traceback reads as it does under torchrun, wherever it is printed."""
    if getattr(function, "_elastic_timed", False):
        return function

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        first = begin not in _written
        if first:
            mark(begin)
        try:
            result = function(*args, **kwargs)
        except BaseException:
            if first:
                mark(end)
            _leave_traceback(sys._getframe(1))
            raise
        if first:
            mark(end)
        return result

    _WRAPPERS.add(timed.__code__)  # type: ignore[attr-defined]  # functools.wraps hides it from mypy
    timed._elastic_timed = True  # type: ignore[attr-defined]
    return timed


# The code of the wrappers above: their entries are what :func:`_leave_traceback` takes out.
_WRAPPERS: set[CodeType] = set()


def _leave_traceback(caller: FrameType | None) -> None:
    """Take the wrapper's entry out of the traceback of the exception it is re-raising, as the
    exception reaches ``caller`` (the frame that called the wrapper).

    An exception passing through a Python frame always gets that frame's entry, so the wrapper
    cannot leave itself out; the caller's frame is where it can be done. A one-shot trace
    function on that frame gets the ``exception`` event there, when the traceback already reads
    caller, wrapper, callee, and links the caller's entry past the wrapper's; the traceback
    object is the one every reader sees later (``sys.excepthook``, ``traceback.print_exc()`` in
    the caller's ``except``, ``logging.exception``, torch's ``@record``). The first event of
    any kind ends the tracing. Never done under another trace function (a debugger, coverage):
    the wrapper's entry then stays, and theirs is left alone."""
    if caller is None or sys.gettrace() is not None:
        return

    def done() -> None:
        sys.settrace(None)
        caller.f_trace = None

    def on_call(frame: FrameType, event: str, arg: Any) -> None:  # a frame started first: give up
        done()

    def on_event(frame: FrameType, event: str, arg: Any) -> None:
        done()
        if event == "exception":
            _unlink_wrappers(arg[2])

    try:
        caller.f_trace = on_event
        sys.settrace(on_call)
    except Exception:  # noqa: BLE001 - never in the way of the exception itself
        pass


def _unlink_wrappers(tb: TracebackType | None) -> None:
    """Link each entry of ``tb`` past the wrappers' entries that follow it."""
    try:
        while tb is not None:
            after = tb.tb_next
            while after is not None and after.tb_frame.f_code in _WRAPPERS:
                after = after.tb_next
            if after is not tb.tb_next:
                tb.tb_next = after
            tb = after
    except Exception:  # noqa: BLE001 - a traceback left as it was is no harm
        pass


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
