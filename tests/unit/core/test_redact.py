"""Redaction: secret-looking names and credentials inside URLs never reach what elastic writes."""

from __future__ import annotations

import pytest

from elastic.core.redact import REDACTED, is_secret_name, redact_argv, redact_env, redact_text, redact_value


@pytest.mark.parametrize(
    "name",
    ["API_TOKEN", "db-password", "HTTP_AUTH", "SENTRY_DSN", "AZURE_STORAGE_CONNECTION_STRING",
     "SESSION_COOKIE", "SSH_PRIVATE_KEY_FILE", "GCP_PRIVATE", "PROXY_AUTHORIZATION", "AUTH",
     "DB_PASS", "SMTP_PASS", "MYSQL_PWD", "GH_PAT", "GPG_PASSPHRASE", "PASSPHRASE", "PASS",
     "SSHPASS", "DOCKER_AUTH_CONFIG", "CI_JOB_JWT", "CI_JOB_JWT_V2", "AUTH_HEADER"],
)
def test_secret_name_shapes(name: str) -> None:
    """Tokens, passwords, *_AUTH, *_DSN, *_PASS, *_PWD, *_PAT, passphrases, connection strings,
    cookies and private things are secret."""
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name", ["PATH", "GIT_AUTHOR_NAME", "AUTHOR", "DSN_COUNT_X", "HOME", "PWD", "OLDPWD", "PASSTHROUGH",
             "PYTHONPATH", "XDG_SESSION_PATH"],
)
def test_ordinary_names_are_not_secret(name: str) -> None:
    """GIT_AUTHOR_NAME contains AUTH but is not a credential; the shell's PWD and OLDPWD are directories."""
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://alice:pw@host/db", f"postgresql://alice:{REDACTED}@host/db"),
        ("mysql://u:p@ss@h:3306/d?x=1", f"mysql://u:{REDACTED}@h:3306/d?x=1"),
        ("https://h/x?a=1&token=abc&b=2", f"https://h/x?a=1&token={REDACTED}&b=2"),
        ("redis://:secret@cache:6379/0", f"redis://:{REDACTED}@cache:6379/0"),
        ("postgresql://alice:p/w@rd@host/db", f"postgresql://alice:{REDACTED}@host/db"),
        ("s3://k:a/b/c@bucket/x?sig=1@2", f"s3://k:{REDACTED}@bucket/x?sig=1@2"),
        ('{"url": "mysql://u:p/q@h/d", "mail": "a@b"}', f'{{"url": "mysql://u:{REDACTED}@h/d", "mail": "a@b"}}'),
        ("http://host:8080/path", "http://host:8080/path"),
        ("no url at all: a:b@c", "no url at all: a:b@c"),
    ],
)
def test_passwords_inside_urls_are_redacted_and_the_url_kept(text: str, expected: str) -> None:
    """The password (or a secret query parameter) goes; scheme, user, host and path stay."""
    assert expected == redact_text(text)


def test_argv_and_environment_lose_url_passwords() -> None:
    """--db URL and DATABASE_URL=URL keep the URL without its password."""
    argv = ["python", "t.py", "--db", "postgresql://alice:pw@host/db", "--out=s3://k:v@b/x", "--token", "t"]
    assert ["python", "t.py", "--db", f"postgresql://alice:{REDACTED}@host/db",
            f"--out=s3://k:{REDACTED}@b/x", "--token", REDACTED] == redact_argv(argv)
    env = {"DATABASE_URL": "postgresql://alice:pw@host/db", "SENTRY_DSN": "https://k@x/1", "PATH": "/bin"}
    assert {"DATABASE_URL": f"postgresql://alice:{REDACTED}@host/db", "SENTRY_DSN": REDACTED,
            "PATH": "/bin"} == redact_env(env)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--db-pass", "x"], ["--db-pass", REDACTED]),
        (["--passphrase", "x"], ["--passphrase", REDACTED]),
        (["--passphrase=x"], [f"--passphrase={REDACTED}"]),
        (["--smtp-pass=x"], [f"--smtp-pass={REDACTED}"]),
        (["--bypass-cache", "x"], ["--bypass-cache", REDACTED]),
        (["GH_PAT=x", "MYSQL_PWD=y"], [f"GH_PAT={REDACTED}", f"MYSQL_PWD={REDACTED}"]),
        (["--steps", "5", "PWD=/w"], ["--steps", "5", "PWD=/w"]),
    ],
)
def test_any_flag_whose_name_holds_pass_hides_its_value(argv: list[str], expected: list[str]) -> None:
    """A flag naming `pass` anywhere (`--db-pass`, `--passphrase`) hides its value; a variable
    assignment is judged by the variable's name."""
    assert expected == redact_argv(argv)


JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJwcm9qZWN0X3BhdGgifQ.c2lnbmF0dXJlLWJ5dGVz"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SSHPASS=hunter2 sshpass -e ssh node7", f"SSHPASS={REDACTED} sshpass -e ssh node7"),
        (f"export CI_JOB_JWT={JWT}", f"export CI_JOB_JWT={REDACTED}"),
        ('DOCKER_AUTH_CONFIG={"auths": {"r.io": {"auth": "dTpw"}}}', f"DOCKER_AUTH_CONFIG={REDACTED}"),
        ("connect(db_password=s3cret) failed", f"connect(db_password={REDACTED}) failed"),
        (f"401 for token {JWT} at step 3", f"401 for token {REDACTED} at step 3"),
        ("Authorization: Bearer abc.def-ghi", f"Authorization: Bearer {REDACTED}"),
        ("step=7 loss=0.25 lr=1e-4 name=run-3", "step=7 loss=0.25 lr=1e-4 name=run-3"),
    ],
)
def test_secret_assignments_tokens_and_headers_in_a_line_are_redacted(text: str, expected: str) -> None:
    """What a rank prints: a secret-looking NAME=value (a JSON value to the line's end), a JSON Web
    Token wherever it stands, an authorization header's credentials; ordinary key=value stays."""
    assert expected == redact_text(text)
    assert expected == redact_text(expected)  # redacting twice changes nothing


def test_a_records_fields_are_redacted_through_nested_dicts_and_lists() -> None:
    """A failure's log tail, diagnosis line and the root cause nested in run_finished."""
    fields = {"log_tail": ["ok", "psycopg2: postgresql://user:pass@host/db refused"], "exit_code": 1,
              "root_cause": {"diagnosis": {"line": "SSHPASS=pw"}, "rank": 0}, "node": None}
    assert {"log_tail": ["ok", f"psycopg2: postgresql://user:{REDACTED}@host/db refused"], "exit_code": 1,
            "root_cause": {"diagnosis": {"line": f"SSHPASS={REDACTED}"}, "rank": 0}, "node": None} == redact_value(fields)
