"""What option values are: how each kind is read from text, and which values it allows.

A :class:`Value` reads an option's text (a flag's argument, a TOML value, an
``ELASTIC_*`` variable) with one message for every way it can be wrong
(``must be an integer >= 0, got '-1'``), and checks a value given by code
(``RunConfig(max_restarts=-1)``) against the same rule. The option table
(:mod:`elastic.core.options.table`) gives each option one of these.
"""

from __future__ import annotations

import enum
import math
import re
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, TypeVar

from elastic.core.labels import signal_name, signal_number

__all__ = [
    "ConfigError",
    "LogFormat",
    "MAX_SECONDS",
    "MAX_SECONDS_TEXT",
    "Value",
    "choice",
    "parse_backoff",
    "parse_limit",
    "parse_listen_port",
    "parse_master_port",
    "parse_nnodes",
    "parse_nonnegative_int",
    "parse_notice_signal",
    "parse_nproc",
    "parse_preempt_signal",
    "parse_positive_int",
    "parse_positive_seconds",
    "parse_ranks",
    "parse_run_id",
    "parse_seconds",
    "parse_timeout",
    "parse_window",
]

T = TypeVar("T")


class ConfigError(ValueError):
    """A user error in the configuration; the message names the flag and what is allowed."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


class LogFormat(enum.Enum):
    CONSOLE = "console"
    JSON = "json"


def _refuse(text: str) -> NoReturn:
    raise ValueError(text)


@dataclass(frozen=True)
class Value(Generic[T]):
    """A kind of option value: ``allowed`` says it in words, for people."""

    allowed: str
    read: Callable[[str], T] = _refuse  # text -> value; ValueError when the text is not one
    valid: Callable[[Any], bool] = lambda _value: True  # also checks the type: code passes anything
    words: Mapping[str, T] = field(default_factory=dict)  # spelled values: 'auto' -> None
    explains: bool = False  # read's own ValueError says what is wrong better than `allowed`

    @property
    def only_words(self) -> bool:
        """A choice between words (``--backend auto|local|ray``), with no text read otherwise."""
        return self.read is _refuse

    def parse(self, text: str) -> T:
        """The value ``text`` spells; ``ValueError('must be ALLOWED, got TEXT')`` otherwise."""
        if text in self.words:
            return self.words[text]
        try:
            value = self.read(text)
        except ValueError:
            if self.explains:
                raise
            raise ValueError(f"must be {self.allowed}, got {text!r}") from None
        if not self.valid(value):
            raise ValueError(f"must be {self.allowed}, got {text!r}")
        return value

    def check(self, value: object) -> bool:
        """Whether ``value``, given by code rather than text, is one this kind allows."""
        if any(type(value) is type(word) and value == word for word in self.words.values()):
            return True
        try:
            return not self.only_words and bool(self.valid(value))
        except TypeError:
            return False


def choice(words: Mapping[str, T]) -> Value[T]:
    """One of a few words, each standing for a value."""
    return Value(f"one of {', '.join(words)}", words=words)


def _integer(low: int, high: float = math.inf) -> Callable[[Any], bool]:
    return lambda n: isinstance(n, int) and not isinstance(n, bool) and low <= n <= high


# The longest any option in seconds may be: about 31 years, far below what a wait can take
# (threading.TIMEOUT_MAX, ~292 years on Linux), so that a deadline of now plus two of them
# still fits every wait; 1e300 would pass "a number" and overflow the first wait it reached.
MAX_SECONDS_TEXT = "1e9"
MAX_SECONDS = float(MAX_SECONDS_TEXT)


def _seconds(positive: bool) -> Callable[[Any], bool]:
    def valid(s: Any) -> bool:
        number = isinstance(s, (int, float)) and not isinstance(s, bool)
        return number and (0 < s if positive else 0 <= s) and s <= MAX_SECONDS

    return valid


def _pair(convert: Callable[[str], T]) -> Callable[[str], tuple[T, T]]:
    """``A`` or ``A:B`` -> ``(A, B)`` (``(A, A)`` for one)."""

    def read(text: str) -> tuple[T, T]:
        low, sep, high = text.partition(":")
        first = convert(low)
        return first, convert(high) if sep else first

    return read


def _read_ranks(text: str) -> frozenset[int]:
    ranks: set[int] = set()
    for part in text.split(","):
        low, sep, high = part.strip().partition("-")
        first = int(low)
        last = int(high) if sep else first
        if first < 0 or last < first:
            raise ValueError(text)
        ranks.update(range(first, last + 1))
    return frozenset(ranks)


def _pair_of(kind: type | tuple[type, ...], low: float, high: float = math.inf) -> Callable[[Any], bool]:
    def valid(pair: Any) -> bool:
        return (
            isinstance(pair, tuple) and len(pair) == 2
            and all(isinstance(x, kind) and not isinstance(x, bool) for x in pair)
            and low <= pair[0] <= pair[1] < math.inf and pair[1] <= high
        )

    return valid


_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

NPROC: Value[int | None] = Value("a positive integer or 'auto'", int, _integer(1), {"auto": None})
POSITIVE_INT: Value[int] = Value("an integer >= 1", int, _integer(1))
COUNT: Value[int] = Value("an integer >= 0", int, _integer(0))
LIMIT: Value[int | None] = Value("an integer >= 0 or 'unlimited'", int, _integer(0), {"unlimited": None})
SECONDS: Value[float] = Value(
    f"a number of seconds from 0 to {MAX_SECONDS_TEXT}", float, _seconds(positive=False)
)
POSITIVE_SECONDS: Value[float] = Value(
    f"a number of seconds > 0 and <= {MAX_SECONDS_TEXT}", float, _seconds(positive=True)
)
WINDOW: Value[float | None] = Value(
    f"seconds > 0 and <= {MAX_SECONDS_TEXT}, or 'run'", float, _seconds(positive=True), {"run": None}
)
TIMEOUT: Value[float | None] = Value(
    f"seconds > 0 and <= {MAX_SECONDS_TEXT}, or 'none'", float, _seconds(positive=True), {"none": None}
)
PERCENT: Value[float] = Value(
    "a percent from 0 to 100", float,
    lambda p: isinstance(p, (int, float)) and not isinstance(p, bool) and 0 <= p <= 100,
)
MASTER_PORT: Value[int] = Value("a port number 1-65535", int, _integer(1, 65535))
LISTEN_PORT: Value[int] = Value("a port number 0-65535 (0: any free)", int, _integer(0, 65535))
NODES: Value[tuple[int, int]] = Value(
    "N or MIN:MAX with 1 <= MIN <= MAX", _pair(int), _pair_of(int, 1)
)
BACKOFF: Value[tuple[float, float]] = Value(
    f"INITIAL:MAX seconds with 0 <= INITIAL <= MAX <= {MAX_SECONDS_TEXT}", _pair(float),
    _pair_of((int, float), 0, MAX_SECONDS),
)
RUN_ID: Value[str] = Value(
    "1-64 letters, digits, '.', '_' or '-' starting with a letter or digit",
    str, lambda s: isinstance(s, str) and _RUN_ID.match(s) is not None,
)
RANKS: Value[frozenset[int] | None] = Value(
    "'all', 'none' or ranks like '0,2-3'", _read_ranks,
    lambda r: isinstance(r, frozenset) and all(_integer(0)(n) for n in r),
    {"all": None, "none": frozenset()},
)
TEXT: Value[str] = Value("a string", str, lambda s: isinstance(s, str))
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _read_modules(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(","))


MODULES: Value[tuple[str, ...]] = Value(
    "module names separated by commas (`torch,jax`) or 'none'",
    _read_modules,
    lambda m: isinstance(m, tuple) and len(m) > 0 and all(isinstance(x, str) and _MODULE.match(x) for x in m),
    {"none": ()},
)

# The launcher's own: stop signals end the run, SIGCHLD is how it hears its children,
# SIGKILL and SIGSTOP cannot be caught.
_NOT_A_NOTICE = frozenset(
    {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD}
)
_UNCATCHABLE = frozenset({signal.SIGKILL, signal.SIGSTOP})


def _signal_number(text: str) -> int:
    """``USR1``, ``SIGUSR1``, ``sigusr1`` or ``10`` -> 10."""
    name = text.strip().upper()
    if name.isdigit():
        number = int(name)
        if number not in set(signal.valid_signals()):
            raise ValueError(f"must be a signal name like USR1 or SIGUSR1, got {text!r}")
        return number
    named = signal_number(name)
    if named is None:
        raise ValueError(f"must be a signal name like USR1 or SIGUSR1, got {text!r}")
    return named


def _read_notice_signal(text: str) -> int:
    number = _signal_number(text)
    if number in _NOT_A_NOTICE:
        raise ValueError(
            f"must be a signal the launcher can take as a notice, like USR1 or USR2, not "
            f"{signal_name(number)} (SIGTERM, SIGINT and SIGHUP stop the run; SIGKILL, "
            "SIGSTOP and SIGCHLD cannot be one)"
        )
    return number


def _read_preempt_signal(text: str) -> int:
    number = _signal_number(text)
    if number in _UNCATCHABLE:
        raise ValueError(
            f"must be a signal a rank can catch, like TERM, USR1, or 'none', not {signal_name(number)}"
        )
    return number


def _catchable(number: Any, refused: frozenset[signal.Signals]) -> bool:
    return (
        isinstance(number, int) and not isinstance(number, bool)
        and number in set(signal.valid_signals()) and number not in refused
    )


NOTICE_SIGNAL: Value[int] = Value(
    "a signal name like USR1 or SIGUSR1, not TERM, INT, HUP, KILL, STOP or CHLD",
    _read_notice_signal, lambda n: _catchable(n, _NOT_A_NOTICE), explains=True,
)
# 0: no signal (the notice file alone); kill(2) takes 0 as "send nothing".
PREEMPT_SIGNAL: Value[int] = Value(
    "a signal name like TERM or SIGUSR1, or 'none'",
    _read_preempt_signal, lambda n: _catchable(n, _UNCATCHABLE), {"none": 0}, explains=True,
)


# The parsers by name, as flags' `type=` and tests use them.
parse_nproc = NPROC.parse
parse_positive_int = POSITIVE_INT.parse
parse_nonnegative_int = COUNT.parse
parse_limit = LIMIT.parse
parse_seconds = SECONDS.parse
parse_positive_seconds = POSITIVE_SECONDS.parse
parse_window = WINDOW.parse
parse_timeout = TIMEOUT.parse
parse_master_port = MASTER_PORT.parse
parse_listen_port = LISTEN_PORT.parse
parse_nnodes = NODES.parse
parse_backoff = BACKOFF.parse
parse_run_id = RUN_ID.parse
parse_ranks = RANKS.parse
parse_notice_signal = NOTICE_SIGNAL.parse
parse_preempt_signal = PREEMPT_SIGNAL.parse
