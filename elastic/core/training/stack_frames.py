"""Stack dumps read as values, and the frame that explains a hang picked from them (pure).

py-spy prints, for each process, its threads and each thread's frames,
innermost first: Python frames as ``name (file.py:line)``, and with
``--native`` the native frames merged in as ``name (library)``,
``name (file.c:line)`` or a bare ``0x7f... (library)``. :func:`parse_dump`
reads that text (and the lines :mod:`elastic.node.probes.stacks` writes around it);
:func:`explain_hang` picks, on the main thread, the frame that says why a rank
hangs: the innermost native frame of the program itself (``c10d::Work::wait``,
a gloo destructor) over the C library's and the interpreter's waits; else the
innermost Python frame. A main thread with no Python frame left, or whose
outermost Python frame is not the script's (``<module>``, ``runpy``), is at
interpreter exit: an at-exit handler, a finalizer, the wait for non-daemon
threads, a destructor run by the garbage collector at shutdown.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# A script's own entry (the outermost Python frame of a main thread still running it): the rank
# bootstrap's, which judges a signal caught at exit by the same names.
from elastic.worker.bootstrap.rank_signals import ENTRY_NAMES

__all__ = [
    "Frame",
    "HangFrame",
    "ProcessDump",
    "ThreadDump",
    "explain_hang",
    "parse_dump",
]

_PROCESS = re.compile(r"^Process (\d+): (.*)$")
_THREAD = re.compile(r'^Thread (\S+) \(([^)]*)\)(?:: "(.*)")?$')
_FRAME = re.compile(r"^\s+(.*) \(([^()]*)\)$")
# A file with a line number that is compiled code, not Python source.
_NATIVE_SOURCE = re.compile(r"\.(c|cc|cpp|cxx|h|hh|hpp|cu|cuh|rs|s|S|f90|m|mm)(:\d+)?$")
# Libraries whose frames never explain a hang: the C library, the C++ runtime,
# the unwinder, the foreign-function layer, the interpreter itself.
_SYSTEM_LIBRARY = re.compile(
    r"^(libc|libpthread|librt|libdl|libm|ld-linux[^.]*|ld|libstdc\+\+|libc\+\+|libgcc_s|libffi|"
    r"libpython[\d.]*|python[\d.]*)([.-].*)?$"
)
# Frames by name that never explain a hang wherever they are (a build with debug
# information names a source file, not the library): the C library's waits and
# internals, the interpreter's own functions, the glue that calls into C or frees
# a wrapped object, the C++ runtime's threads and locks.
_SYSTEM_NAME = re.compile(
    r"^(__|pthread_|sem_|futex|clock_nanosleep$|nanosleep$|pause$|poll$|ppoll$|select$|pselect|epoll_|"
    r"read$|recv|accept|syscall$|sigwait|sigsuspend|waitpid$|wait4?$|"
    r"_?Py|_?py|lock_PyThread|take_gil|drop_gil|time_sleep|thread_run|gc_collect|atexit_|builtin_|"
    r"method_|cfunction_|slot_tp_|subtype_dealloc|_ctypes|_call_function_pointer|ffi_|"
    r"pybind11::|pybind11_|c10::intrusive_ptr<|torch::PyWarningHandler|"
    r"std::(thread|condition_variable|mutex|unique_lock|future|__basic_future|__future_base|_Function_handler))"
)

@dataclass(frozen=True)
class Frame:
    """One frame as py-spy names it: ``name (where)``; ``python`` for interpreted code."""

    name: str
    where: str
    python: bool

    @property
    def native(self) -> bool:
        return not self.python

    @property
    def named(self) -> bool:
        """False for a native frame known only by its address (a library without symbols)."""
        return not self.name.startswith("0x")

    def __str__(self) -> str:
        return f"{self.name} ({self.where})"


@dataclass(frozen=True)
class ThreadDump:
    """One thread: its id as py-spy prints it, its state, its name, frames innermost first."""

    thread_id: str
    state: str
    name: str | None
    frames: tuple[Frame, ...]


@dataclass(frozen=True)
class ProcessDump:
    """One process of a dump: its threads, or why it has none (``error``)."""

    pid: int
    command: str
    threads: tuple[ThreadDump, ...] = ()
    error: str | None = None

    def main_thread(self) -> ThreadDump | None:
        """The thread whose id is the pid's (or named MainThread, or else the first)."""
        for thread in self.threads:
            if thread.thread_id == str(self.pid):
                return thread
        for thread in self.threads:
            if thread.name == "MainThread":
                return thread
        return self.threads[0] if self.threads else None


def _frame(name: str, where: str) -> Frame:
    python = not name.startswith("0x") and ":" in where and not _NATIVE_SOURCE.search(where)
    return Frame(name, where, python)


def parse_dump(text: str) -> tuple[ProcessDump, ...]:
    """The processes of a py-spy dump (``py-spy dump [--native]`` of one or more processes,
    as :mod:`elastic.node.probes.stacks` writes them: ``#`` lines and failures included)."""
    processes: list[ProcessDump] = []
    pid: int | None = None
    command = ""
    error: str | None = None
    threads: list[ThreadDump] = []
    thread: tuple[str, str, str | None] | None = None
    frames: list[Frame] = []

    def end_thread() -> None:
        nonlocal thread, frames
        if thread is not None:
            threads.append(ThreadDump(*thread, frames=tuple(frames)))
        thread, frames = None, []

    def end_process() -> None:
        nonlocal threads, error
        end_thread()
        if pid is not None:
            processes.append(ProcessDump(pid, command, tuple(threads), error))
        threads, error = [], None

    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if match := _PROCESS.match(line):
            end_process()
            pid, command = int(match[1]), match[2]
            if command.startswith(("py-spy ", "not dumped")):
                error, command = command, ""
        elif match := _THREAD.match(line):
            end_thread()
            thread = (match[1], match[2], match[3])
        elif thread is not None and (match := _FRAME.match(line)):
            frames.append(_frame(match[1], match[2]))
    end_process()
    return tuple(processes)


@dataclass(frozen=True)
class HangFrame:
    """Where a rank's main thread is stuck, picked from its dump by :func:`explain_hang`.

    ``frame`` explains the hang; ``waiting_in`` is the wait inside it (the innermost
    named native frame, when that is another); ``called_from`` the innermost
    Python frame when ``frame`` is native; ``at_exit`` why the interpreter is
    judged to be exiting (None: it is not), naming ``handler``, the at-exit
    handler or finalizer running, where there is one; ``native`` whether the
    dump had native frames at all (a Python-only dump cannot see past the last
    Python frame).
    """

    frame: Frame | None
    waiting_in: Frame | None = None
    called_from: Frame | None = None
    at_exit: str | None = None
    handler: Frame | None = None
    native: bool = True

    def describe(self) -> str:
        """What follows "rank 3's main thread" in a hang report:
        ``is at interpreter exit (no Python frame left), in c10d::...``."""
        parts = []
        if self.at_exit is not None:
            parts.append(f"is at interpreter exit ({self.at_exit})")
        if self.frame is not None and self.frame != self.handler:
            parts.append(f"is in {self.frame}" if not parts else f"in {self.frame}")
        elif not parts:
            parts.append("has no frame py-spy could read")
        if self.waiting_in is not None:
            parts.append(f"waiting in {self.waiting_in}")
        if self.called_from is not None:
            parts.append(f"called from {self.called_from}")
        if not self.native:
            parts.append("Python frames only")
        return ", ".join(parts)


def _is_program(frame: Frame) -> bool:
    """A named native frame of the program or its libraries, not of the system or glue."""
    if frame.python or not frame.named:
        return False
    return not _SYSTEM_LIBRARY.match(frame.where) and not _SYSTEM_NAME.match(frame.name)


def _at_exit(process: ProcessDump, main: ThreadDump) -> tuple[str | None, Frame | None]:
    """Why the main thread's stack says the interpreter is exiting (or None), and the
    at-exit handler or finalizer it is in, if one."""
    python = [frame for frame in main.frames if frame.python]
    if not python:
        return "no Python frame left", None
    outermost = python[-1]
    if outermost.name in ENTRY_NAMES:
        return None, None
    if outermost.name == "_shutdown" and outermost.where.startswith("threading.py"):
        others = [t.name or t.thread_id for t in process.threads if t is not main][:3]
        waited = f": {', '.join(others)}" if others else ""
        return f"waiting for non-daemon threads to end{waited}", None
    return f"in the at-exit handler or finalizer {outermost}", outermost


def explain_hang(dumps: Sequence[ProcessDump]) -> HangFrame | None:
    """The frame that explains why the first dumped Python process (a wrapper shell is
    skipped) is stuck, read on its main thread; None when no process could be dumped."""
    process = next((p for p in dumps if p.error is None and p.threads), None)
    if process is None:
        return None
    main = process.main_thread()
    if main is None:
        return None
    native = any(frame.native for thread in process.threads for frame in thread.frames)
    at_exit, handler = _at_exit(process, main)
    first_python = next((i for i, frame in enumerate(main.frames) if frame.python), len(main.frames))
    inner = main.frames[:first_python]  # the native frames inside the innermost Python frame
    python = main.frames[first_python] if first_python < len(main.frames) else None
    program = next((i for i, frame in enumerate(inner) if _is_program(frame)), None)
    frame: Frame | None
    if program is not None:
        frame, waits = inner[program], inner[:program]
        called_from = python
    elif python is not None:
        frame, waits, called_from = python, inner, None
    else:  # no Python frame and nothing of the program: the wait itself is all there is
        named = [f for f in inner if f.named]
        frame, waits, called_from = (named[0] if named else None), (), None
    waiting_in = next((f for f in waits if f.named), None)
    return HangFrame(frame, waiting_in, called_from, at_exit, handler, native)
