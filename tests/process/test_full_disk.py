"""A full disk under the run directory: an error naming the file, and never a success undone.

The file systems are real: a tiny tmpfs mounted for the test (needs root or CAP_SYS_ADMIN;
skipped otherwise), filled by a rank until the kernel says ENOSPC.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Launcher, is_alive, per_rank, read_pids, script


def _mount_tmpfs(where: Path, options: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                             capture_output=True, text=True, check=False, timeout=30)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")


@pytest.fixture
def small_run_dir(tmp_path: Path) -> Iterator[Path]:
    """The launcher's run directory (tmp_path/run) on its own 512 KiB tmpfs."""
    where = tmp_path / "run"
    _mount_tmpfs(where, "size=512k,mode=0700")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)


@pytest.fixture
def attempt_dir_without_inodes(tmp_path: Path) -> Iterator[Path]:
    """tmp_path/run/attempt-0 on a tmpfs with no inode left: no rank log can be created."""
    where = tmp_path / "run" / "attempt-0"
    _mount_tmpfs(where, "size=64k,nr_inodes=1,mode=0700")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)


def _warnings(stderr: str) -> list[dict[str, object]]:
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [e for e in events if e.get("event") == "run_file_write_failed"]


def test_a_disk_that_fills_as_the_ranks_succeed_never_turns_success_into_failure(
    small_run_dir: Path, launcher: Launcher
) -> None:
    """The rank fills the disk and exits 0: the run exits 0, and the files it could not write are named."""
    finished = launcher.run(command=script("fill_disk.py", small_run_dir / "ballast", 0))

    assert 0 == finished.returncode, finished.explain()
    unwritable = {str(e["path"]) for e in _warnings(finished.stderr)}
    assert str(small_run_dir / "report.json") in unwritable, finished.explain()
    assert "internal error" not in finished.stderr
    assert not list(small_run_dir.glob(".*.tmp")), "a failed atomic write left its temporary behind"


def test_a_disk_full_while_ranks_run_is_an_error_naming_the_file_and_the_ranks_are_stopped(
    small_run_dir: Path, launcher: Launcher, pid_dir: Path
) -> None:
    """Rank 0 fills the disk and exits 0 while rank 1 runs: exit 74, the file named, rank 1 stopped."""
    command = per_rank(("fill_disk.py", small_run_dir / "ballast", 0, "--wait-for", pid_dir / "rank-1.pid"),
                       ("sleep_forever.py", pid_dir))
    process = launcher.start("--nproc-per-node", 2, command=command)
    [sleeper] = read_pids(pid_dir, 1)
    finished = launcher.finished(process)

    assert 74 == finished.returncode, finished.explain()
    [line] = [line for line in finished.stderr.splitlines() if line.startswith("elastic: error:")]
    assert f"cannot write {small_run_dir}/" in line and "No space left on device" in line, line
    assert not is_alive(sleeper)


def test_a_rank_log_that_cannot_be_created_is_an_error_naming_it(
    attempt_dir_without_inodes: Path, launcher: Launcher
) -> None:
    """No inode left for rank-0.log: exit 74 naming the log, not an internal error (70)."""
    finished = launcher.run(command=script("exit_with.py", 0))

    assert 74 == finished.returncode, finished.explain()
    assert f"cannot write {attempt_dir_without_inodes / 'rank-0.log'}: No space left on device" in finished.stderr
    assert "internal error" not in finished.stderr
