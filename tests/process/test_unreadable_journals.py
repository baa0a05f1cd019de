"""Journals that cannot be read, as `elastic status`, `elastic report` and `elastic run --run-id`
meet them: one line naming the file, the line and the problem, exit status 2, nothing changed;
and a driver's state.json that is no JSON object, or has a field of the wrong type."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from harness import elastic_command

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "journal-v1-failed.jsonl"
RUNNING_LINES = 13  # through attempt 1's "running": the journal of a driver that died


def _newer_version(lines: list[bytes]) -> int:
    first = json.loads(lines[0])
    lines[0] = json.dumps({**first, "journal_version": 3}).encode()
    return 1


def _not_utf8(lines: list[bytes]) -> int:
    lines[4] = lines[4].replace(b'"vm"', b'"v\xffm"')
    return 5


def _attempt_null(lines: list[bytes]) -> int:
    lines[10] = json.dumps({**json.loads(lines[10]), "attempt": None}).encode()
    return 11


def _plan_of_the_wrong_shape(lines: list[bytes]) -> int:
    lines[1] = json.dumps({**json.loads(lines[1]), "nproc_per_node": "two"}).encode()
    return 2


DAMAGE: dict[str, tuple[Callable[[list[bytes]], int], str]] = {
    "newer-version": (_newer_version, "journal format version 3 is newer than this elastic reads"),
    "not-utf8": (_not_utf8, "not UTF-8 text (byte 0xff"),
    "attempt-null": (_attempt_null, "attempt_started has attempt null, not a whole number"),
    "plan-wrong-shape": (_plan_of_the_wrong_shape, "(attempt_started) has a plan of the wrong shape"),
}


def _snapshot(run_dir: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(run_dir)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("command", ["status", "report", "run --run-id"], ids=["status", "report", "run-again"])
def test_a_journal_that_cannot_be_read_is_a_one_line_error_naming_file_and_line(
    tmp_path: Path, damage: str, command: str
) -> None:
    """A newer format version, a byte that is not UTF-8, `"attempt": null`, or a plan of the
    wrong shape in a dead driver's journal: each reader exits 2 with one line naming the
    journal, the line and the problem (no traceback), and the run directory is left as it was."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines = FIXTURE.read_bytes().split(b"\n")[:RUNNING_LINES]
    spoil, says = DAMAGE[damage]
    line = spoil(lines)
    journal = run_dir / "journal.jsonl"
    journal.write_bytes(b"\n".join(lines) + b"\n")
    before = _snapshot(run_dir)

    if command == "run --run-id":
        shown = elastic_command("run", "--run-dir", str(run_dir), "--run-id", "fixture-v1-failed",
                                "--", sys.executable, "-c", "pass", cwd=tmp_path)
        prefix = "elastic: error: --run-id: "
    else:
        shown = elastic_command(command, str(run_dir), cwd=tmp_path)
        prefix = "elastic: error: "

    assert 2 == shown.returncode, shown.stderr
    [error] = shown.stderr.splitlines()
    assert error.startswith(f"{prefix}{journal}:{line}: ") and says in error, error
    assert before == _snapshot(run_dir)


@pytest.mark.parametrize("state", [b"[1, 2]", b"\xff{", b'{"run_id": "r", "attempt": "one"}'],
                         ids=["a-list", "not-utf8", "attempt-a-string"])
def test_a_state_file_that_cannot_be_read_is_never_a_traceback(tmp_path: Path, state: bytes) -> None:
    """A dead driver's state.json that is a list, not UTF-8, or says attempt "one": `elastic
    status` still shows the journal's story; `elastic stack` says in one line why it cannot."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "journal.jsonl").write_bytes(FIXTURE.read_bytes().split(b"\n")[:RUNNING_LINES][0] + b"\n")
    (run_dir / "state.json").write_bytes(state)
    before = _snapshot(run_dir)

    status = elastic_command("status", str(run_dir), cwd=tmp_path)
    stack = elastic_command("stack", str(run_dir), cwd=tmp_path)

    assert 0 == status.returncode and "Traceback" not in status.stderr, status.stderr
    assert "fixture-v1-failed" in status.stdout, status.stdout
    assert 0 != stack.returncode and "Traceback" not in stack.stderr, stack.stderr
    [error] = stack.stderr.splitlines()
    assert "state.json" in error, error
    assert before == _snapshot(run_dir)
