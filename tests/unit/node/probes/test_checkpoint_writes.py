"""What a node reads of a checkpoint write under way: files held open for writing under the
checkpoint directory by the ranks' sessions, and the directory's latest write."""

from __future__ import annotations

import os
from pathlib import Path

from elastic.core.failures import CheckpointWrite
from elastic.core.launch.spec import WorkerSpec
from elastic.node.probes.checkpoint_writes import checkpoint_writes, open_for_write, session_processes
from elastic.node.supervisor import RunningWorker
from elastic.worker.checkpoint import CHECKPOINT_DIR_VAR

LONG_AGO = 1_000_000.0


def _quiet(directory: Path) -> Path:
    directory.mkdir(exist_ok=True)
    for path in (*directory.iterdir(), directory):
        os.utime(path, (LONG_AGO, LONG_AGO))
    return directory


def _worker(env: dict[str, str]) -> RunningWorker:
    """This test's own session as a rank's: the rank's processes are those of its session."""
    spec = WorkerSpec(attempt=0, rank=0, local_rank=0, node_id="n0", argv=("python",), env=env, log_path="rank-0.log")
    return RunningWorker(spec, os.getsid(0), 0.0)


def test_a_file_open_for_writing_under_the_directory_is_seen(tmp_path: Path) -> None:
    """Written through a link to the directory, too: paths compare after resolving."""
    directory = _quiet(tmp_path / "ckpt")
    (tmp_path / "link").symlink_to(directory)
    with open(tmp_path / "link" / "shard.bin", "wb"):
        assert open_for_write([os.getpid()], [str(directory)])
        assert open_for_write([os.getpid()], [str(tmp_path / "link")])


def test_a_file_open_for_reading_or_elsewhere_is_no_write(tmp_path: Path) -> None:
    directory = _quiet(tmp_path / "ckpt")
    (directory / "old.bin").write_bytes(b"kept")
    with open(directory / "old.bin", "rb"), open(tmp_path / "elsewhere.bin", "wb"):
        assert not open_for_write([os.getpid()], [str(directory)])
        # A sibling whose name starts like the directory's is not under it.
        assert not open_for_write([os.getpid()], [str(tmp_path / "else")])


def test_the_processes_of_a_session_are_found() -> None:
    assert os.getpid() in session_processes({os.getsid(0)})
    assert os.getpid() not in session_processes({-1})


def test_no_checkpoint_directory_says_nothing_can_be_seen() -> None:
    assert CheckpointWrite(directory=False) == checkpoint_writes([_worker({})], wall=LONG_AGO + 60)


def test_a_quiet_directory_is_no_write_and_an_open_file_in_it_is(tmp_path: Path) -> None:
    directory = _quiet(tmp_path / "ckpt")
    worker = _worker({CHECKPOINT_DIR_VAR: str(directory)})
    assert CheckpointWrite(True, 60.0, False) == checkpoint_writes([worker], wall=LONG_AGO + 60)
    with open(directory / "shard.bin", "wb"):
        _quiet(directory)  # its time says long ago; the open file says otherwise
        assert CheckpointWrite(True, 60.0, True) == checkpoint_writes([worker], wall=LONG_AGO + 60)


def test_a_write_stamped_just_now_or_later_reads_as_just_now(tmp_path: Path) -> None:
    """A file server's clock ahead of the node's: the write is not in the past, and counts as recent."""
    directory = _quiet(tmp_path / "ckpt")
    worker = _worker({CHECKPOINT_DIR_VAR: str(directory)})
    assert CheckpointWrite(True, 0.0) == checkpoint_writes([worker], wall=LONG_AGO - 5)


def test_a_directory_not_made_yet_is_no_write(tmp_path: Path) -> None:
    worker = _worker({CHECKPOINT_DIR_VAR: str(tmp_path / "not-yet")})
    assert CheckpointWrite(True, None, False) == checkpoint_writes([worker], wall=LONG_AGO)
