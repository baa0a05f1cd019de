"""structlog set-up: the console's events for people (or JSON lines, when asked), at a verbosity."""

from __future__ import annotations

import logging

import structlog

from elastic.core.options.config import LogFormat
from elastic.run.console.writer import Console
from elastic.run.console.events import ConsoleEvents, Verbosity

__all__ = ["configure_logging"]


class _ConsoleLogger:
    """A structlog logger that hands rendered lines to a non-blocking :class:`Console`."""

    def __init__(self, console: Console) -> None:
        self._console = console

    def msg(self, message: str) -> None:
        self._console.write(message)

    debug = info = warning = warn = error = critical = exception = fatal = msg


def configure_logging(
    console: Console,
    log_format: LogFormat,
    verbosity: Verbosity = Verbosity.DEFAULT,
    *,
    run_dir: str | None = None,
) -> None:
    """Route ``structlog`` events to ``console``: those ``verbosity`` shows, in words for
    people (``--log-format console``, terminal or not) or as JSON lines (``json``)."""
    events = ConsoleEvents(verbosity, run_dir=run_dir)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if log_format is LogFormat.JSON else events.render
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            events,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=lambda *_: _ConsoleLogger(console),
        cache_logger_on_first_use=False,
    )
