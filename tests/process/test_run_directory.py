"""The run directory on disk after a real run: private to its owner (DESIGN §9, §13)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from harness import Launcher, elastic_command, launcher_env, per_rank, script
from run_directory_page import documented_run_files, kind_of

from elastic.node.probes.stacks import find_py_spy


def test_run_directory_is_0700_and_every_file_in_it_0600(launcher: Launcher) -> None:
    """After a run with a restart, every directory of the run is 0700 and every file 0600."""
    finished = launcher.run(
        "--max-restarts",
        1,
        "--nproc-per-node",
        2,
        command=script("exit_with.py", 1, "--attempt", 0),
        env=launcher_env(),
    )
    assert 0 == finished.returncode, finished.explain()

    modes = {}
    for root, dirs, files in os.walk(launcher.run_dir):
        for name in [root, *(os.path.join(root, f) for f in files)]:
            modes[os.path.relpath(name, launcher.run_dir)] = stat.S_IMODE(os.stat(name).st_mode)
    expected = {path: 0o700 if os.path.isdir(launcher.run_dir / path) else 0o600 for path in modes}
    assert {".", "journal.jsonl", "state.json", "report.json", "attempt-1/rank-1.log"} <= set(modes)
    assert {p: oct(m) for p, m in expected.items()} == {p: oct(m) for p, m in modes.items()}


def test_run_directory_modes_do_not_depend_on_a_permissive_umask(launcher: Launcher) -> None:
    """Even under umask 000 the run directory is 0700 and its files 0600."""
    previous = os.umask(0)
    try:
        finished = launcher.run(command=script("exit_with.py", 3))
    finally:
        os.umask(previous)
    assert 3 == finished.returncode, finished.explain()

    assert 0o700 == stat.S_IMODE(launcher.run_dir.stat().st_mode)
    assert 0o700 == stat.S_IMODE((launcher.run_dir / "attempt-0").stat().st_mode)
    for name in ("journal.jsonl", "state.json", "report.json", "attempt-0/rank-0.log"):
        assert (name, 0o600) == (name, stat.S_IMODE((launcher.run_dir / name).stat().st_mode))


@pytest.mark.parametrize("writer", ["write_error_file.py", "raise_recorded.py"], ids=["like-torch", "elastic-record"])
def test_error_files_written_by_ranks_are_0600(launcher: Launcher, writer: str) -> None:
    """torch's @record writes with the umask's mode (0644); in the run directory it ends 0600."""
    previous = os.umask(0o022)
    try:
        finished = launcher.run(command=script(writer))
    finally:
        os.umask(previous)
    assert 1 == finished.returncode, finished.explain()

    error_file = launcher.run_dir / "attempt-0" / "rank-0.error.json"
    assert 0o600 == stat.S_IMODE(error_file.stat().st_mode)
    assert finished.report()["root_cause"]["message"]


def _kinds(run_dir: Path) -> set[str]:
    """Each file under ``run_dir``, in the reference page's terms (``attempt-K/rank-R.log``)."""
    return {kind_of(os.path.relpath(os.path.join(root, name), run_dir))
            for root, _, files in os.walk(run_dir) for name in files}


def test_every_kind_of_file_real_runs_leave_is_in_the_run_directory_reference(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A run whose rank 1 hangs at exit once (stacks, heartbeats, start-up marks, signals), then
    `elastic report` (the timeline), and a run whose rank writes an error file: every kind of file
    in their run directories is named by docs/reference/run-directory.md."""
    checkpoints, out = tmp_path / "ckpt", tmp_path / "out"
    checkpoints.mkdir()
    out.mkdir()
    launcher.run_dir = tmp_path / "hang"
    hung = launcher.run("--nproc-per-node", 2, "--exit-timeout", 3, "--max-restarts", 1, "--backoff", "0:0",
                        command=script("hangs_at_exit.py", checkpoints, out, 10, 0, "working"))
    assert 0 == hung.returncode, hung.explain()
    drawn = elastic_command("report", launcher.run_dir)
    assert 0 == drawn.returncode, drawn.stderr
    launcher.run_dir = tmp_path / "recorded"
    recorded = launcher.run("--nproc-per-node", 2, command=per_rank(["exit_with.py", 0], ["raise_recorded.py"]))
    assert 1 == recorded.returncode, recorded.explain()

    found = _kinds(tmp_path / "hang") | _kinds(tmp_path / "recorded")

    expected = {"driver.lock", "journal.jsonl", "state.json", "report.json", "timeline.html",
                "attempt-K/rank-R.log", "attempt-K/rank-R.heartbeat", "attempt-K/rank-R.startup",
                "attempt-K/rank-R.signals", "attempt-K/rank-R.error.json"}
    if find_py_spy() is not None:
        expected.add("attempt-K/stacks/rank-R.txt")
    assert expected <= found, sorted(found)
    assert [] == sorted(found - documented_run_files())
