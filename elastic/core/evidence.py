"""How a rank ended, read once: the typed evidence every verdict rule reads. Pure.

A rank leaves evidence of how it ended in four places: its exit status; the last lines
of its output (the node's tail, :mod:`elastic.node.logs.tail`) and its error file
(torch's ``@record``); its *account*, what the rank bootstrap wrote from inside its
interpreter (``ELASTIC_SIGNALS_FILE``: each stop handler that ran and when, JAX's
preemption sync point, the exception ``sys.excepthook`` was handed); and, for a rank
killed as hung, its stack. This module turns the text of the first three into values;
the stack is :mod:`elastic.core.training.stack_frames`'. The rules that judge from them
(:mod:`elastic.core.rank_ends`, :mod:`elastic.core.diagnosis`, :func:`elastic.core.failures.classify`)
read these values and never raw lines, so that what an exception line, an ending
exception, a stop signal and "past start-up" are is written here once.

**The exception that ended the rank** (:func:`ending_error`), the strongest first:

1. the one the interpreter handed to ``sys.excepthook`` (the bootstrap's record): it
   ended the rank's script, whatever was printed around it, and whatever hook a
   framework put in front (torch's ``[rankN]:`` prefixer calls the one before it);
2. else its output's final traceback block, read through the prefixes launchers and
   torch put before each line (:func:`unprefixed`), and only when nothing after its
   exception line shows the program going on: blank and indented lines, PyTorch's advice,
   and what an interpreter prints on its way out (C++ log lines, Python warnings,
   ``Exception ignored in``, torch's ``destroy_process_group() was not called``) may
   follow it, and at most :data:`MESSAGE_LINES` lines of the exception's own message.
   A traceback followed by anything else was handled (``logging.exception``, an import
   probe) and is not how the rank ended. A rank that died of a signal was not ended by
   the text of a traceback: only the excepthook's record says an exception ended it.

**Past start-up** (:func:`past_startup`): a training step was seen, or, for a program
whose progress lines the launcher does not know, it ran :data:`STARTUP_WITHOUT_STEP_S`
and printed something. Rules that hold only at start-up (a missing module, a missing
file) and the "same failure twice" rule read it; unsure, a rank is past start-up,
the cheaper error (one restart too many rather than a fixable run stopped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "LINE_CAP", "MESSAGE_LINES", "STARTUP_WITHOUT_STEP_S", "CaughtSignal", "EndingError", "RankAccount",
    "ending_error", "exception_name", "final_traceback", "normalize", "past_startup", "read_account", "unprefixed",
]

# The characters of a line that matching reads: its first and its last this many.
LINE_CAP = 1000
# Lines after an exception line that may still be its own message (not the program going on):
# NCCL's DistBackendError adds "ncclSystemError: ...", "Last error:" and the error itself.
MESSAGE_LINES = 3
# A rank that showed no step it is known by is past start-up once it has run this long and
# printed something: a start-up (imports, the model built, a checkpoint read) rarely takes
# longer before the first line of training, and where it does, restarting once is the cheap error.
STARTUP_WITHOUT_STEP_S = 120.0
_SHOWN_CHARS = 500

# -- lines ---------------------------------------------------------------------------------

# Prefixes launchers and loggers put before a line, stripped before matching: ANSI colours;
# torch's [rank3]: and torchrun --tee's [default3]:; srun -l's "3: "; glog's
# "E0212 19:58:10.123 1234 file.cc:310] "; torch's C++ "[E ProcessGroupNCCL.cpp:737] " and
# "[E321 02:07:08.408 ProcessGroupNCCL.cpp:607] "; Ray's "(pid=4331, ip=10.0.0.2) ".
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX = re.compile(
    r"^(?:\[(?:rank|default)\d+\]:\s*|\d+: |[IWEF]\d{4} [\d:.]+\s+\d+\s+[\w.\-]+:\d+\]\s*"
    r"|\[[IWEF](?:\d{3,4})?[ \d:.]*[\w.\-]+\.(?:cpp|cc|hpp|h|py):\d+\]\s*|\((?:\w+ )?pid=\d+(?:, ip=[\d.]+)?\)\s*)"
)
# The prefixes that stand before every line of a rank's own output (not a logger's), each with
# the one space it adds: what is left keeps its indentation (a traceback's frames are indented).
_RANK_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]: ?|\d+: |\((?:\w+ )?pid=\d+(?:, ip=[\d.]+)?\) )")


def normalize(line: str) -> str:
    """The line without colours and the prefixes launchers and loggers add, its length capped
    at its first and last :data:`LINE_CAP` characters, stripped."""
    if len(line) > 2 * LINE_CAP:
        line = line[:LINE_CAP] + " … " + line[-LINE_CAP:]
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return _without(_PREFIX, line.strip())


def unprefixed(line: str) -> str:
    """The line as the rank's interpreter wrote it: without colours and the prefix a launcher
    or torch's excepthook put before it, its indentation kept, trailing space dropped."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return _without(_RANK_PREFIX, line.rstrip())


def _without(prefix: re.Pattern[str], line: str) -> str:
    """``line`` with every ``prefix`` at its start taken off, one after the other."""
    while True:
        stripped = prefix.sub("", line, count=1)
        if stripped == line:
            return line
        line = stripped


# -- the exception that ended the rank -----------------------------------------------------

_TRACEBACK_HEAD = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s+File "')
# An exception line as the interpreter prints it after a traceback: its (dotted) name, then
# ": " and the message, or nothing (``AssertionError``).
_EXCEPTION = re.compile(r"^(?P<name>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?::(?: .*)?)?$")
# What an interpreter prints on its way out, after the exception that ended it.
_AT_EXIT = re.compile(
    r"^(?:\[?[IWEF]\d{4} |\[[IWEF][\w .:\-]*\.(?:cpp|cc|h|hpp):\d+\]|\S+:\d+: \w*Warning: |\w*Warning: "
    r"|Exception ignored in|sys:\d+: \w*Warning|warnings\.warn\(|.*destroy_process_group\(\) was not called"
    r"|.*resource_tracker: |Error in atexit\._run_exitfuncs:)"
)
# Advice PyTorch prints after a CUDA or HIP error (and their search hint): part of its message.
_ADVICE = ("Search for `", "CUDA kernel errors might be", "HIP kernel errors might be", "For debugging consider passing",
           "Compile with `TORCH_USE_")


@dataclass(frozen=True)
class EndingError:
    """The exception that ended a rank's script: its line (``OSError: [Errno 28] No space left
    on device``), where it was read (``excepthook``: the interpreter's own record; ``error file``:
    torch's ``@record``; ``output``: the final traceback of its output) and, when read from the
    output, the line's index in it."""

    line: str
    source: str
    index: int | None = None

    @property
    def name(self) -> str:
        """The exception's name without its module: ``OSError``."""
        return exception_name(self.line) or self.line.split(":", 1)[0]


def exception_name(line: str) -> str | None:
    """The exception a line as printed after a traceback names (``DistBackendError`` for
    ``torch.distributed.DistBackendError: ...``), or None when it is no such line."""
    match = _EXCEPTION.match(line.strip())
    if match is None:
        return None
    return match["name"].rsplit(".", 1)[-1]


def final_traceback(lines: Sequence[str]) -> tuple[int, str] | None:
    """The index and exception line of the output's final traceback when nothing after it shows
    the program going on (see the module's docstring); None otherwise.

    A traceback whose head was cut off by the tail (a deep one) is found by its frames.
    """
    text = [unprefixed(line) for line in lines]
    last_frame = next(
        (i for i in range(len(text) - 1, -1, -1) if _FRAME.match(text[i]) or text[i].endswith(_TRACEBACK_HEAD)), None
    )
    if last_frame is None:
        return None
    found = next((i for i in range(last_frame + 1, len(text)) if text[i].strip() and not text[i][0].isspace()), None)
    if found is None or exception_name(text[found]) is None or text[found].startswith(_ADVICE):
        return None
    message = 0
    for line in text[found + 1:]:
        if not line.strip() or line[0].isspace() or line.startswith(_ADVICE) or _AT_EXIT.match(line):
            continue
        message += 1
        if message > MESSAGE_LINES:
            return None  # the program went on: a handled traceback
    return found, _shown(normalize(text[found]))


def ending_error(
    lines: Sequence[str], *, uncaught: str | None = None, recorded: str | None = None, died_of_signal: bool = False
) -> EndingError | None:
    """The exception that ended the rank's script, on the strongest evidence, or None.

    ``lines``: its output's last lines; ``uncaught``: what the rank bootstrap recorded
    ``sys.excepthook`` was handed; ``recorded``: the message of its error file (torch's
    ``@record`` writes it for the exception that left the function it wraps);
    ``died_of_signal``: its process died of a signal, so a traceback in its output did not end
    it (only the interpreter's own record or the error file can say one did).
    """
    if uncaught:
        return EndingError(_shown(uncaught), "excepthook")
    if recorded and recorded.strip():
        return EndingError(_shown(recorded.strip().splitlines()[-1]), "error file")
    if died_of_signal:
        return None
    found = final_traceback(lines)
    if found is None:
        return None
    return EndingError(found[1], "output", found[0])


def _shown(line: str) -> str:
    return line if len(line) <= _SHOWN_CHARS else line[: _SHOWN_CHARS - 1] + "…"


# -- the rank's own account ----------------------------------------------------------------


@dataclass(frozen=True)
class CaughtSignal:
    """A stop signal a Python handler of the rank caught: the latest time it did.

    ``age_s``: seconds from that catch to when the node read the account (the rank's exit);
    ``at_exit``: the interpreter had already left the script then; ``handler``: the handler,
    as a stack dump names it (``save (train.py:12)``).
    """

    signal: int
    name: str
    age_s: float | None
    at_exit: bool
    handler: str | None = None
    pid: int | None = None  # the process whose handler caught it


@dataclass(frozen=True)
class RankAccount:
    """What the rank bootstrap wrote from inside a rank's interpreter (its signals file).

    ``caught``: each stop signal's latest catch, earliest first; ``preemption_sync``: the step
    at which JAX's preemption sync point answered true, and how long before the read;
    ``uncaught``: the exception ``sys.excepthook`` was handed (``OSError: [Errno 28] ...``);
    ``installed``: (signal, pid) of each Python handler the rank's code installed.
    """

    caught: tuple[CaughtSignal, ...] = ()
    preemption_sync: tuple[int, float | None] | None = None
    uncaught: str | None = None
    installed: frozenset[tuple[int, int | None]] = frozenset()

    def own_handler(self, signum: int, pid: int) -> tuple[bool, bool]:
        """Whether process ``pid``'s own Python code installed a handler for ``signum``, and whether
        one of its ran (a catch says it was installed too)."""
        ran = any(c.signal == signum and c.pid == pid for c in self.caught)
        return ran or (signum, pid) in self.installed, ran


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_account(text: str, *, now: float, pid: int | None = None) -> RankAccount:
    """The account a rank's signals file holds (its text), read at wall time ``now``.

    One JSON object a line: ``{"signal": 15, "name": "SIGTERM", "handler": "save (train.py:12)",
    "at_exit": false, "time": ...}`` for a handler that ran, ``{"installed": 15, ...}`` for one the
    rank's code installed, ``{"preemption_sync": 194, ...}`` for JAX's sync point reached,
    ``{"uncaught": "ValueError: ...", ...}`` for the exception handed to ``sys.excepthook``.
    A line that is not such an object (a torn write) is passed over; a later catch of a
    signal replaces an earlier one. ``pid``: the rank's own process; an exception another
    Python process wrote (one the rank started, which inherits its variables) is not the rank's.
    """
    caught: dict[int, CaughtSignal] = {}
    sync: tuple[int, float | None] | None = None
    uncaught: str | None = None
    installed: set[tuple[int, int | None]] = set()
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        at = _number(entry.get("time"))
        age_s = None if at is None else max(0.0, now - at)
        step = entry.get("preemption_sync")
        if isinstance(step, int) and not isinstance(step, bool):
            sync = sync or (step, age_s)
            continue
        writer = entry.get("pid") if isinstance(entry.get("pid"), int) else None
        number = entry.get("installed")
        if isinstance(number, int) and not isinstance(number, bool):
            installed.add((number, writer))
            continue
        if isinstance(entry.get("uncaught"), str):
            if pid is None or entry.get("pid") == pid:
                uncaught = str(entry["uncaught"])
            continue
        number = entry.get("signal")
        if not isinstance(number, int) or isinstance(number, bool) or not isinstance(entry.get("at_exit"), bool):
            continue
        handler = entry.get("handler")
        caught.pop(number, None)  # the latest catch, in the order caught
        caught[number] = CaughtSignal(
            number, str(entry.get("name") or f"SIG{number}"), age_s, bool(entry["at_exit"]),
            handler if isinstance(handler, str) and handler else None, writer,
        )
    return RankAccount(tuple(caught.values()), sync, uncaught, frozenset(installed))


# -- progress ------------------------------------------------------------------------------


def past_startup(*, step_seen: bool, ran_s: float | None, printed: bool) -> bool:
    """Whether a rank that failed was past its start-up: a training step was seen, or (none
    known) it ran :data:`STARTUP_WITHOUT_STEP_S` and printed something. ``ran_s``: seconds from
    its attempt's launch to its failure (None: not known, so past: the cheaper error)."""
    if step_seen:
        return True
    if ran_s is None:
        return True
    return printed and ran_s >= STARTUP_WITHOUT_STEP_S
