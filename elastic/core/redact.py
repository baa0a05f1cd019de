"""Keeping secret-looking values out of the journal, the report and the console.

What a rank printed is copied into the run's records (a failure's log tail, its diagnosis
line, its traceback, a ``--preflight``'s output): every field of every record passes
:func:`redact_value` on its way into the journal, and so into ``report.json`` and the
summary, which are read from it. The rank's own log file stays as the rank wrote it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

__all__ = [
    "REDACTED", "is_secret_flag", "is_secret_name", "redact_argv", "redact_env", "redact_text", "redact_value",
]

REDACTED = "<redacted>"
# Anywhere in the name (upper-cased, '-' read as '_').
_SECRET_MARKERS = (
    "TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL",
    "CONNECTION_STRING", "COOKIE", "PRIVATE", "AUTHORIZATION", "PASSPHRASE",
    "JWT", "SSHPASS", "_AUTH_",  # CI_JOB_JWT, SSHPASS (sshpass -e), DOCKER_AUTH_CONFIG
)  # fmt: skip
_SECRET_PREFIXES = ("AUTH_",)
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
# NAME=value in a line (`SSHPASS=hunter2 sshpass -e ...`, `export CI_JOB_JWT=...`, `--db-pass=x`);
# a value that opens a JSON object, a list or a quote (`DOCKER_AUTH_CONFIG={"auths": ...}`) goes
# to the end of the line, whatever it holds.
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_])(?P<head>(?P<name>[A-Za-z_][A-Za-z0-9_-]*)=)(?P<value>[{\[\"'].*|[^\s\"'&;,)\]}]+)"
)
# A JSON Web Token (a CI job's OIDC token, a bearer token): header.payload.signature, base64url.
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")
# An HTTP authorization header's credentials (`Authorization: Bearer ...`, `Basic ...`).
_AUTH_HEADER = re.compile(r"(?i)(?P<head>authorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+)[^\s\"']+")


def is_secret_name(name: str) -> bool:
    upper = name.upper().replace("-", "_")
    return (
        any(marker in upper for marker in _SECRET_MARKERS)
        or upper.endswith(_SECRET_SUFFIXES)
        or upper in _SECRET_NAMES
        or upper.startswith(_SECRET_PREFIXES)
    )


def redact_text(text: str) -> str:
    """``text`` with credentials inside URLs replaced, the rest of the URL kept, and the values
    of secret-looking assignments, JSON Web Tokens and authorization headers.

    ``postgresql://alice:pw@host/db`` becomes ``postgresql://alice:<redacted>@host/db``;
    ``https://host/x?token=abc`` becomes ``https://host/x?token=<redacted>``;
    ``SSHPASS=pw sshpass -e ssh host`` becomes ``SSHPASS=<redacted> sshpass -e ssh host``.
    """
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: m["head"] + REDACTED, text)
        text = _QUERY_PARAM.sub(lambda m: m["head"] + REDACTED if is_secret_name(m["name"]) else m[0], text)
    if "=" in text:
        text = _ASSIGNMENT.sub(
            lambda m: m["head"] + REDACTED if is_secret_flag(m["name"]) and m["value"] != REDACTED else m[0], text
        )
    if "eyJ" in text:
        text = _JWT.sub(REDACTED, text)
    if "uthorization" in text or "UTHORIZATION" in text:
        text = _AUTH_HEADER.sub(lambda m: m["head"] + REDACTED, text)
    return text


def redact_value(value: object) -> object:
    """``value`` with :func:`redact_text` applied to every string in it, through dicts, lists and
    tuples (a record's fields: a log tail, a diagnosis, a failure nested in ``run_finished``)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v) for v in value]
    return value


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
