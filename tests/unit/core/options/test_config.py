"""Flag parsers and the CLI's usage errors: one line naming the flag, status 2."""

from __future__ import annotations

import threading

import pytest

from elastic.cli.entry import main
from elastic.core.options.config import (
    parse_master_port,
    parse_nonnegative_int,
    parse_nproc,
    parse_ranks,
    parse_run_id,
    parse_seconds,
)
from elastic.core.options.values import (
    MAX_SECONDS,
    parse_backoff,
    parse_positive_seconds,
    parse_timeout,
    parse_window,
)


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        (parse_nproc, "auto", None), (parse_nproc, "8", 8),
        (parse_nonnegative_int, "0", 0), (parse_seconds, "2.5", 2.5), (parse_seconds, "0", 0.0),
        (parse_master_port, "29500", 29500), (parse_run_id, "exp-1.a_b", "exp-1.a_b"),
        (parse_ranks, "all", None), (parse_ranks, "none", frozenset()),
        (parse_ranks, "0,2-4", frozenset({0, 2, 3, 4})),
    ],
)
def test_parsers_accept_what_the_help_promises(parse, text, expected) -> None:  # type: ignore[no-untyped-def]
    """Each allowed spelling parses to its value."""
    assert expected == parse(text)


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (parse_nproc, "0"), (parse_nproc, "-2"), (parse_nproc, "two"),
        (parse_nonnegative_int, "-1"), (parse_nonnegative_int, "1.5"),
        (parse_seconds, "-5"), (parse_seconds, "nan"), (parse_seconds, "inf"),
        (parse_master_port, "0"), (parse_master_port, "65536"),
        (parse_run_id, "../x"), (parse_run_id, ""), (parse_run_id, "a" * 65),
        (parse_ranks, "1-"), (parse_ranks, "3-1"), (parse_ranks, "-1"),
    ],
)
def test_parsers_reject_with_what_is_allowed(parse, text: str) -> None:  # type: ignore[no-untyped-def]
    """A bad value raises with 'must be ...' and echoes the input."""
    with pytest.raises(ValueError, match=r"must be .*got"):
        parse(text)


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        (parse_seconds, "1e9", MAX_SECONDS), (parse_positive_seconds, "1e9", MAX_SECONDS),
        (parse_window, "1e9", MAX_SECONDS), (parse_timeout, "1e9", MAX_SECONDS),
        (parse_backoff, "0:1e9", (0.0, MAX_SECONDS)),
    ],
)
def test_seconds_up_to_the_maximum_are_accepted(parse, text, expected) -> None:  # type: ignore[no-untyped-def]
    """Every kind of seconds takes MAX_SECONDS (1e9 s, about 31 years) itself."""
    assert expected == parse(text)


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (parse_seconds, "1e300"), (parse_seconds, "1000000001"),
        (parse_positive_seconds, "1e300"), (parse_window, "1e300"), (parse_timeout, "1e300"),
        (parse_backoff, "1e300"), (parse_backoff, "1:1e300"), (parse_backoff, "1e10:1e300"),
    ],
)
def test_seconds_beyond_the_maximum_are_refused_with_the_range(parse, text: str) -> None:  # type: ignore[no-untyped-def]
    """A number of seconds above MAX_SECONDS (which no wait could take: threading.TIMEOUT_MAX)
    is refused with the allowed range in the message, not left to overflow a wait later."""
    assert MAX_SECONDS < threading.TIMEOUT_MAX / 2
    with pytest.raises(ValueError, match=rf"must be .*1e9.*, got {text!r}"):
        parse(text)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["run", "--nproc-per-node", "0", "--", "true"], "--nproc-per-node"),
        (["run", "--max-restarts", "-1", "--", "true"], "--max-restarts"),
        (["run", "--grace-period", "-5", "--", "true"], "--grace-period"),
        (["run", "--nproc-per-node", "1"], "COMMAND"),
        (["run", "--nproc-per-node", "1", "--"], "COMMAND"),
    ],
)
def test_usage_errors_are_one_line_naming_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch  # type: ignore[no-untyped-def]
) -> None:
    """Bad input exits 2 with one stderr line that names the flag, and creates nothing."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        raise SystemExit(main(argv))
    err = capsys.readouterr().err
    assert 2 == exited.value.code
    assert 1 == len(err.strip().splitlines())
    assert flag in err
    assert [] == list(tmp_path.iterdir())
