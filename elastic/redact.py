"""Keeping secret-looking values out of the journal, the report and the console."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["REDACTED", "is_secret_name", "redact_argv", "redact_env"]

REDACTED = "<redacted>"
_SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")


def is_secret_name(name: str) -> bool:
    upper = name.upper().replace("-", "_")
    return any(marker in upper for marker in _SECRET_MARKERS)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with the values of secret-looking names replaced."""
    return {k: REDACTED if is_secret_name(k) else v for k, v in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``--api-key=X``, ``API_TOKEN=X`` and ``--password X`` with X replaced."""
    redacted: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            redacted.append(REDACTED)
            hide_next = False
            continue
        name, sep, _ = arg.partition("=")
        if sep and is_secret_name(name):
            redacted.append(f"{name}={REDACTED}")
            continue
        if arg.startswith("-") and is_secret_name(arg.lstrip("-")):
            hide_next = True
        redacted.append(arg)
    return redacted
