"""Option values from a TOML file and ``ELASTIC_*`` variables, checked like the flags.

Precedence: command line > ``ELASTIC_*`` environment > ``--config`` file >
defaults. This module turns the file and the environment into argparse
defaults; the command line then overrides them (and replaces, for repeatable
options, the list these give). Which options there are, their variable
(:attr:`elastic.core.options.table.Option.env`) and their file key
(:attr:`elastic.core.options.table.Option.key`) come from the option table.

The variables elastic sets in ranks (:data:`elastic.core.launch.spec.RANK_VARIABLES`) are
never read as configuration: an option whose ``ELASTIC_<OPTION>`` name is one
of them is read from ``ELASTIC_OPTION_<OPTION>`` instead (``--run-id`` from
``ELASTIC_OPTION_RUN_ID``), so an ``elastic run`` started inside a rank does
not take over the outer run's id or checkpoint directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomllib

from elastic.cli.suggest import nearest
from elastic.core.options.table import OPTIONS, Option
from elastic.core.options.values import ConfigError

__all__ = ["SETTINGS", "env_settings", "file_settings"]

# The options a file or the environment may set: all but --config itself.
SETTINGS: dict[str, Option] = {row.dest: row for row in OPTIONS if row.flag != "--config"}


def _switch(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("1", "true", "yes", "on"):
        return True
    if str(value).lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"must be true or false, got {value!r}")


def _shape_problem(row: Option, value: Any) -> str | None:
    """Why a file's ``value`` cannot be read as ``row``'s at all (a table, a list where one
    value belongs), else None; the text of a string, number or boolean is checked by the parser."""
    if isinstance(value, dict):
        return "must be one value, not a table"
    if isinstance(value, list):
        if not row.repeat:
            return "must be one value, not a list"
        if any(isinstance(item, (dict, list)) for item in value):
            return "must be a list of values, not of lists or tables"
    return None


def _convert(row: Option, value: Any, where: str) -> Any:
    """A file or environment value, validated by the flag's own parser, as argparse stores it."""
    if (problem := _shape_problem(row, value)) is not None:
        raise ConfigError(where, f"{problem} (same as {row.flag})")
    try:
        if row.value is None:
            return _switch(value)
        if row.repeat:
            items = value if isinstance(value, list) else str(value).split(",")
            return [row.read(str(item)) for item in items]
        return row.read(str(value))
    except ValueError as error:
        raise ConfigError(where, f"{error} (same as {row.flag})") from None


def file_settings(path: Path) -> dict[str, Any]:
    """Defaults from a TOML file: keys are option names (``max-restarts`` or ``max_restarts``),
    at the top level or under ``[run]``, not both (a key beside ``[run]`` would be ignored);
    ``command`` may give the command as a list. Relative paths are the file's folder's."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError("--config", f"{path}: cannot read it: {error.strerror}") from None
    except UnicodeDecodeError as error:  # TOML is UTF-8
        raise ConfigError(
            "--config", f"{path}: not UTF-8 text (byte {error.object[error.start]:#04x} at offset {error.start})"
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError("--config", f"{path}: not valid TOML: {error}") from None
    table = data.get("run", data)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: run", f"must be a table of options ([run]), got {table!r}")
    if table is not data and (outside := sorted(key for key in data if key != "run")):
        raise ConfigError(
            f"{path}: {outside[0]}", "is outside [run], beside it: put every option under [run], or none"
        )
    settings: dict[str, Any] = {}
    for key, value in table.items():
        dest = key.replace("-", "_")
        if dest == "command":
            if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
                raise ConfigError(f"{path}: command", "must be a non-empty list of strings")
            settings["config_command"] = [str(v) for v in value]
            continue
        if dest not in SETTINGS:
            keys = ["command", *sorted(row.key for row in SETTINGS.values())]
            near = nearest(key, keys)
            if near is not None:
                raise ConfigError(f"{path}: {key}", f"is not an option; did you mean {near}?")
            raise ConfigError(f"{path}: {key}", f"is not an option; allowed: {', '.join(keys)}")
        settings[dest] = _against(path, _convert(SETTINGS[dest], value, f"{path}: {key}"))
    return settings


def _against(path: Path, value: Any) -> Any:
    """A file's relative path as the file's folder sees it (``checkpoint-dir = "ckpt"`` in
    ``conf/elastic.toml`` is ``conf/ckpt``), as pyproject-style tools read their files:
    the file then means the same from wherever ``elastic run`` starts."""
    if isinstance(value, Path) and not value.is_absolute():
        return path.absolute().parent / value
    return value


def env_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """Defaults from ``ELASTIC_<OPTION>`` variables (``ELASTIC_MAX_RESTARTS=3``)."""
    return {
        dest: _convert(row, env[row.env], row.env) for dest, row in SETTINGS.items() if row.env in env
    }
