"""Validated, frozen run configuration and the parsers that name the bad flag."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from elastic.heartbeat import HangPolicy
from elastic.policy import (
    DEFAULT_EXIT_TIMEOUT_S,
    DEFAULT_MAX_PREEMPTIONS,
    DEFAULT_PREEMPTION_WINDOW_S,
    ExitHang,
)
from elastic.rules import ExitRule

__all__ = [
    "ConfigError",
    "LogFormat",
    "RunConfig",
    "parse_listen_port",
    "parse_master_port",
    "parse_backoff",
    "parse_limit",
    "parse_nnodes",
    "parse_window",
    "parse_positive_seconds",
    "parse_timeout",
    "parse_nonnegative_int",
    "parse_positive_int",
    "parse_nproc",
    "parse_ranks",
    "parse_run_id",
    "parse_seconds",
]


class ConfigError(ValueError):
    """A user error in the configuration; the message names the flag and what is allowed."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


class LogFormat(enum.Enum):
    AUTO = "auto"
    CONSOLE = "console"
    JSON = "json"


AUTO = "auto"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


_Number = TypeVar("_Number", int, float)


def _parse_number(
    text: str, convert: Callable[[str], _Number], valid: Callable[[_Number], bool], allowed: str
) -> _Number:
    try:
        value = convert(text)
    except ValueError:
        raise ValueError(f"must be {allowed}, got {text!r}") from None
    if not valid(value):
        raise ValueError(f"must be {allowed}, got {text!r}")
    return value


def parse_nproc(text: str) -> int | None:
    """``--nproc-per-node``: a positive integer, or ``auto`` (``None``)."""
    if text == AUTO:
        return None
    return _parse_number(text, int, lambda n: n >= 1, "a positive integer or 'auto'")


def parse_positive_int(text: str) -> int:
    return _parse_number(text, int, lambda n: n >= 1, "an integer >= 1")


def parse_nonnegative_int(text: str) -> int:
    return _parse_number(text, int, lambda n: n >= 0, "an integer >= 0")


def parse_seconds(text: str) -> float:
    return _parse_number(
        text, float, lambda s: 0 <= s < float("inf"), "a number of seconds >= 0"
    )


def parse_master_port(text: str) -> int:
    return _parse_number(text, int, lambda p: 1 <= p <= 65535, "a port number 1-65535")


def parse_listen_port(text: str) -> int:
    return _parse_number(text, int, lambda p: 0 <= p <= 65535, "a port number 0-65535 (0: any free)")


def parse_nnodes(text: str) -> tuple[int, int]:
    """``--nnodes``: ``N`` or ``MIN:MAX`` with ``1 <= MIN <= MAX``."""
    low, sep, high = text.partition(":")
    try:
        first = int(low)
        last = int(high) if sep else first
    except ValueError:
        first = last = 0
    if not 1 <= first <= last:
        raise ValueError(f"must be N or MIN:MAX with 1 <= MIN <= MAX, got {text!r}")
    return first, last


def parse_backoff(text: str) -> tuple[float, float]:
    """``--backoff INITIAL:MAX`` in seconds, ``0 <= INITIAL <= MAX``."""
    low, sep, high = text.partition(":")
    try:
        initial = float(low)
        cap = float(high) if sep else initial
    except ValueError:
        initial = cap = -1.0
    if not (0 <= initial <= cap < float("inf")):
        raise ValueError(f"must be INITIAL:MAX seconds with 0 <= INITIAL <= MAX, got {text!r}")
    return initial, cap


def parse_limit(text: str) -> int | None:
    """A count, or ``unlimited`` (``None``)."""
    if text == "unlimited":
        return None
    return _parse_number(text, int, lambda n: n >= 0, "an integer >= 0 or 'unlimited'")


def parse_window(text: str) -> float | None:
    """Seconds of a sliding window, or ``run`` (``None``: the whole run)."""
    if text == "run":
        return None
    return _parse_number(text, float, lambda s: 0 < s < float("inf"), "seconds > 0 or 'run'")


def parse_positive_seconds(text: str) -> float:
    return _parse_number(text, float, lambda s: 0 < s < float("inf"), "a number of seconds > 0")


def parse_timeout(text: str) -> float | None:
    """Seconds > 0, or ``none`` (``None``: no timeout)."""
    if text == "none":
        return None
    return _parse_number(text, float, lambda s: 0 < s < float("inf"), "seconds > 0 or 'none'")


def parse_run_id(text: str) -> str:
    if not _RUN_ID.match(text):
        raise ValueError(
            f"must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit, got {text!r}"
        )
    return text


def parse_ranks(text: str) -> frozenset[int] | None:
    """``--ranks``: ``all`` (``None``), ``none``, or a list like ``0,2-3``."""
    if text == "all":
        return None
    if text == "none":
        return frozenset()
    ranks: set[int] = set()
    for part in text.split(","):
        low, sep, high = part.strip().partition("-")
        try:
            first = int(low)
            last = int(high) if sep else first
        except ValueError:
            raise ValueError(
                f"must be 'all', 'none' or ranks like '0,2-3', got {text!r}"
            ) from None
        if first < 0 or last < first:
            raise ValueError(f"must be 'all', 'none' or ranks like '0,2-3', got {text!r}")
        ranks.update(range(first, last + 1))
    return frozenset(ranks)


@dataclass(frozen=True)
class RunConfig:
    """Everything ``elastic run`` was asked to do, validated; read once at the edge."""

    command: tuple[str, ...]
    run_id: str
    run_dir: Path
    nproc_per_node: int | None  # None: each node's GPU count (1 without GPUs)
    max_restarts: int = 0
    grace_period_s: float = 30.0
    backend: str = "local"
    echo_ranks: frozenset[int] | None = None
    log_format: LogFormat = LogFormat.AUTO
    isolate_gpus: bool = False
    master_addr: str | None = None
    master_port: int | None = None
    min_nodes: int = 1
    max_nodes: int = 1
    node_wait_timeout_s: float = 300.0
    address: str | None = None
    node_resource: str | None = None
    on_exit: tuple[ExitRule, ...] = ()
    restart_window_s: float | None = None
    max_preemptions: int | None = DEFAULT_MAX_PREEMPTIONS
    preemption_window_s: float | None = DEFAULT_PREEMPTION_WINDOW_S
    backoff_s: tuple[float, float] = (1.0, 60.0)
    max_no_progress: int | None = None
    checkpoint_dir: Path | None = None
    checkpoint_pattern: re.Pattern[str] | None = None  # --checkpoint-pattern; None: built-in names
    scale_up: bool = True
    scale_up_interval_s: float = 300.0
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    hang: HangPolicy | None = None  # --heartbeat-timeout and friends; None: off
    exit_timeout_s: float | None = DEFAULT_EXIT_TIMEOUT_S  # None: ranks may outlive peers forever
    exit_hang: ExitHang = ExitHang.RESTART

    def __post_init__(self) -> None:
        if not self.command:
            raise ConfigError("COMMAND", "missing: give the training command after '--'")
        if self.nproc_per_node is not None and self.nproc_per_node < 1:
            raise ConfigError("--nproc-per-node", "must be a positive integer or 'auto'")
        if not 1 <= self.min_nodes <= self.max_nodes:
            raise ConfigError("--nnodes", "must be N or MIN:MAX with 1 <= MIN <= MAX")
        if self.max_restarts < 0:
            raise ConfigError("--max-restarts", "must be an integer >= 0")
        if self.grace_period_s < 0:
            raise ConfigError("--grace-period", "must be a number of seconds >= 0")
        if self.exit_timeout_s is not None and not 0 < self.exit_timeout_s < float("inf"):
            raise ConfigError("--exit-timeout", "must be seconds > 0 or 'none'")
