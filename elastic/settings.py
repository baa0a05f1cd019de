"""Option values from a TOML file and ``ELASTIC_*`` variables, checked like the flags.

Precedence: command line > ``ELASTIC_*`` environment > ``--config`` file >
defaults. This module turns the file and the environment into argparse
defaults; the command line then overrides them (and replaces, for repeatable
options, the list these give).

The variables elastic sets in ranks (:data:`elastic.plan.RANK_VARIABLES`) are
never read as configuration: an option whose ``ELASTIC_<OPTION>`` name is one
of them is read from ``ELASTIC_OPTION_<OPTION>`` instead (``--run-id`` from
``ELASTIC_OPTION_RUN_ID``), so an ``elastic run`` started inside a rank does
not take over the outer run's id or checkpoint directory.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomllib

from elastic.config import ConfigError
from elastic.plan import RANK_VARIABLES

__all__ = ["ENV_PREFIX", "OPTION_PREFIX", "env_var", "file_settings", "env_settings"]

ENV_PREFIX = "ELASTIC_"
OPTION_PREFIX = "ELASTIC_OPTION_"  # for options whose plain name is a rank variable
# Options that make no sense outside the command line itself.
_NOT_SETTINGS = frozenset({"help", "config", "script", "script_args"})


def env_var(dest: str) -> str:
    """``max_restarts`` -> ``ELASTIC_MAX_RESTARTS``; ``run_id`` -> ``ELASTIC_OPTION_RUN_ID``."""
    name = ENV_PREFIX + dest.upper()
    return OPTION_PREFIX + dest.upper() if name in RANK_VARIABLES else name


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        action.dest: action
        for action in parser._actions  # argparse has no public listing of its actions
        if action.option_strings and action.dest not in _NOT_SETTINGS
    }


def _convert(action: argparse.Action, value: Any, where: str) -> Any:
    """A file or environment value, validated by the flag's own parser."""
    flag = action.option_strings[-1]
    try:
        if isinstance(action, argparse._StoreTrueAction):
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "yes", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(f"must be true or false, got {value!r}")
        if isinstance(action, argparse._AppendAction):
            items = value if isinstance(value, list) else str(value).split(",")
            convert = action.type if callable(action.type) else str
            return [convert(str(item)) for item in items]
        text = str(value)
        if action.choices is not None and text not in action.choices:
            raise ValueError(f"must be one of {', '.join(map(str, action.choices))}, got {text!r}")
        return action.type(text) if callable(action.type) else text
    except (ValueError, argparse.ArgumentTypeError) as error:
        raise ConfigError(where, f"{error} (same as {flag})") from None


def file_settings(path: Path, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Defaults from a TOML file: keys are option names (``max-restarts`` or ``max_restarts``),
    at the top level or under ``[run]``; ``command`` may give the command as a list."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError("--config", f"{path}: cannot read it: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError("--config", f"{path}: not valid TOML: {error}") from None
    table = data.get("run", data)
    options = _options(parser)
    settings: dict[str, Any] = {}
    for key, value in table.items():
        dest = key.replace("-", "_")
        if dest == "command":
            if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
                raise ConfigError(f"{path}: command", "must be a non-empty list of strings")
            settings["config_command"] = [str(v) for v in value]
            continue
        if dest not in options:
            allowed = ", ".join(sorted(d.replace("_", "-") for d in options))
            raise ConfigError(f"{path}: {key}", f"is not an option; allowed: command, {allowed}")
        settings[dest] = _convert(options[dest], value, f"{path}: {key}")
    return settings


def env_settings(env: Mapping[str, str], parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Defaults from ``ELASTIC_<OPTION>`` variables (``ELASTIC_MAX_RESTARTS=3``)."""
    settings: dict[str, Any] = {}
    for dest, action in _options(parser).items():
        name = env_var(dest)
        if name in env:
            settings[dest] = _convert(action, env[name], name)
    return settings
