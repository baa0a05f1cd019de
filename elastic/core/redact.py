"""Keeping secret-looking values out of the journal, the report and the console."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

__all__ = ["REDACTED", "is_secret_flag", "is_secret_name", "redact_argv", "redact_env", "redact_text"]

REDACTED = "<redacted>"
# Anywhere in the name (upper-cased, '-' read as '_').
_SECRET_MARKERS = (
    "TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL",
    "CONNECTION_STRING", "COOKIE", "PRIVATE", "AUTHORIZATION", "PASSPHRASE",
)  # fmt: skip
# At the end of the name only: GIT_AUTHOR_NAME, PASSTHROUGH and the shell's PWD and OLDPWD
# are not secret; HTTP_AUTH, SENTRY_DSN, DB_PASS, MYSQL_PWD and GH_PAT (a personal access
# token) are.
_SECRET_SUFFIXES = ("_AUTH", "_DSN", "_PASS", "_PWD", "_PAT")
_SECRET_NAMES = frozenset({"AUTH", "DSN", "PASS"})
# scheme://user:password@host: the password, up to the last '@' before the query, the
# fragment or the end of the URL, so a password holding '/' or '@' goes whole. (A '@' later
# in a path makes it take more than the password: redacting too much is the safe error.)
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@?#\"'<>]*:)[^\s?#\"'<>]*(?=@)")
# ?password=...&sslkey=...: a query parameter whose name looks secret.
_QUERY_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[^=&;#\s]+)=)(?P<value>[^&;#\s]*)")


def is_secret_name(name: str) -> bool:
    upper = name.upper().replace("-", "_")
    return (
        any(marker in upper for marker in _SECRET_MARKERS)
        or upper.endswith(_SECRET_SUFFIXES)
        or upper in _SECRET_NAMES
    )


def redact_text(text: str) -> str:
    """``text`` with credentials inside URLs replaced, the rest of the URL kept.

    ``postgresql://alice:pw@host/db`` becomes ``postgresql://alice:<redacted>@host/db``;
    ``https://host/x?token=abc`` becomes ``https://host/x?token=<redacted>``.
    """
    if "://" not in text:
        return text
    text = _URL_PASSWORD.sub(lambda m: m["head"] + REDACTED, text)
    return _QUERY_PARAM.sub(
        lambda m: m["head"] + REDACTED if is_secret_name(m["name"]) else m[0], text
    )


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with the values of secret-looking names replaced, and
    passwords inside URLs (``DATABASE_URL=postgresql://alice:pw@host/db``) too."""
    return {k: REDACTED if is_secret_name(k) else redact_text(v) for k, v in env.items()}


def is_secret_flag(flag: str) -> bool:
    """``--api-key``, ``--db-pass``, ``--passphrase``: a secret-looking name, or any flag
    whose name holds ``pass`` (a flag's value is more often a secret than a variable's)."""
    name = flag.lstrip("-")
    return is_secret_name(name) or "PASS" in name.upper()


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``--api-key=X``, ``API_TOKEN=X``, ``--password X`` and ``--db-pass X`` with X
    replaced; URL passwords too."""
    redacted: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            redacted.append(REDACTED)
            hide_next = False
            continue
        name, sep, _ = arg.partition("=")
        if sep and "://" not in name and (is_secret_flag(name) if name.startswith("-") else is_secret_name(name)):
            redacted.append(f"{name}={REDACTED}")
            continue
        if arg.startswith("-") and is_secret_flag(arg):
            hide_next = True
        redacted.append(redact_text(arg))
    return redacted
