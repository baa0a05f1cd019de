"""structlog set-up: console renderer on a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging

import structlog

from elastic.core.options.config import LogFormat
from elastic.run.console import Console

__all__ = ["configure_logging"]


class _ConsoleLogger:
    """A structlog logger that hands rendered lines to a non-blocking :class:`Console`."""

    def __init__(self, console: Console) -> None:
        self._console = console

    def msg(self, message: str) -> None:
        self._console.write(message)

    debug = info = warning = warn = error = critical = exception = fatal = msg


def configure_logging(console: Console, log_format: LogFormat) -> None:
    """Route ``structlog`` events to ``console`` in the chosen format."""
    use_console = log_format is LogFormat.CONSOLE or (
        log_format is LogFormat.AUTO and console.isatty
    )
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(colors=console.isatty)
        if use_console
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=lambda *_: _ConsoleLogger(console),
        cache_logger_on_first_use=False,
    )
