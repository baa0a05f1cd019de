"""Every log event of elastic belongs to the closed vocabulary in elastic/events.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import elastic
from elastic.core.events import EventName, LogEvent

PACKAGE = Path(elastic.__file__).parent
VOCABULARY = {"EventName": EventName, "LogEvent": LogEvent}
LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "msg", "log"}
PAST_TENSE = re.compile(r"_(\w+(ed|en)|lost)$")  # failed, overridden, lost


def _dotted(node: ast.expr) -> str | None:
    """``self._log`` for the expression ``self._log``; None for anything not a plain name chain."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _calls_get_logger(node: ast.expr) -> bool:
    return any(
        isinstance(n, ast.Call) and _dotted(n.func) in {"structlog.get_logger", "get_logger"}
        for n in ast.walk(node)
    )


def _loggers(tree: ast.Module) -> set[str]:
    """The names a module binds to a structlog logger (``_log``, ``self._log``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None and _calls_get_logger(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(name for t in targets if (name := _dotted(t)) is not None)
    return names


def _log_calls(tree: ast.Module, loggers: set[str]) -> list[ast.Call]:
    """Calls of a logging method on a logger: ``_log.info(...)``, ``getattr(self._log, level)(...)``,
    ``structlog.get_logger().info(...)``."""
    calls: list[ast.Call] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in LOG_METHODS:
            if _dotted(func.value) in loggers or _calls_get_logger(func.value):
                calls.append(node)
        elif isinstance(func, ast.Call) and _dotted(func.func) == "getattr" and func.args:
            if _dotted(func.args[0]) in loggers:
                calls.append(node)
    return calls


def _event_of(call: ast.Call) -> str:
    """What the call logs, as ``LogEvent.NODE_LOST``; a string that says why not otherwise."""
    if not call.args:
        return "no event name"
    first = call.args[0]
    dotted = _dotted(first)
    if dotted is None or not dotted.endswith(".value"):
        return f"not a vocabulary member's value: {ast.unparse(first)}"
    enum_name, _, member = dotted.removesuffix(".value").rpartition(".")
    if enum_name in VOCABULARY:
        return f"{enum_name}.{member}" if member in VOCABULARY[enum_name].__members__ else f"unknown {dotted}"
    if dotted == "record.event.value":  # Record.event is an EventName (mypy holds it to that)
        return "EventName.*"
    return f"not a vocabulary member's value: {dotted}"


def _strays(source: str) -> list[str]:
    tree = ast.parse(source)
    return [
        f"line {call.lineno}: {event}"
        for call in _log_calls(tree, _loggers(tree))
        if (event := _event_of(call)) != "EventName.*" and event.split(".")[0] not in VOCABULARY
    ]


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_scan_sees_the_package_log_calls() -> None:
    """The scan finds the logging calls it is meant to police (or it would pass vacuously)."""
    found: set[str] = set()
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found.update(_event_of(c) for c in _log_calls(tree, _loggers(tree)))
    assert {"EventName.*", "LogEvent.NODE_LOST", "LogEvent.TEARDOWN_ERROR_IGNORED"} <= found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_logged_event_is_in_the_vocabulary(path: Path) -> None:
    """A logging call names its event by a member of EventName or LogEvent, never a string."""
    assert [] == _strays(path.read_text(encoding="utf-8"))


def test_the_scan_refuses_strings_and_unknown_members() -> None:
    """A string literal, an f-string or a member the enum lacks is reported, with its line."""
    source = (
        "import structlog\n"
        "_log = structlog.get_logger('elastic')\n"
        "_log.info(LogEvent.NODE_LOST.value)\n"
        "_log.warning('node_lost')\n"
        "_log.error(f'{x}')\n"
        "_log.info(LogEvent.NODE_VANISHED.value)\n"
        "getattr(_log, 'info')(EventName.RUN_STARTED.value)\n"
    )
    assert ["line 4", "line 5", "line 6"] == [s.split(":")[0] for s in _strays(source)]


def test_the_two_vocabularies_do_not_overlap() -> None:
    """A name is either journaled or log-only, never both."""
    assert set() == {e.value for e in EventName} & {e.value for e in LogEvent}


@pytest.mark.parametrize("event", list(LogEvent), ids=lambda e: e.value)
def test_log_only_events_are_past_tense_facts(event: LogEvent) -> None:
    """Log-only events are named as facts that happened (``node_lost``, ``rpc_retried``)."""
    assert PAST_TENSE.search(event.value), event.value
