"""Checkpoint selection (parse_step, choose_latest, find_latest) and the worker-side helper."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from elastic.core.checkpoints.selection import COMMIT_MARKERS, Checkpoint, Entry, choose_latest, parse_step
from elastic.run.watches.checkpoint_scan import CheckpointDirError, find_latest, is_transient, scan_checkpoints
from elastic.worker import (
    COMMIT_MARKER,
    ResumePoint,
    atomic_checkpoint,
    checkpoint_dir,
    resume_point,
    save_json_checkpoint,
)


def file(name: str) -> Entry:
    return Entry(name, is_dir=False)


def directory(name: str, *markers: str) -> Entry:
    return Entry(name, is_dir=True, markers=frozenset(markers))


def committed_dir(parent: Path, name: str, marker: str = "COMMITTED") -> Path:
    path = parent / name
    path.mkdir()
    (path / "model.pt").write_bytes(b"weights")
    (path / marker).write_text(MARKER_CONTENT.get(marker, ""))
    return path


# What a marker holds when its content is judged too (Orbax's as it finalizes a save).
MARKER_CONTENT = {
    "trainer_state.json": "{}",
    "_CHECKPOINT_METADATA": '{"item_handlers": {}, "init_timestamp_nsecs": 1796299831675087301, '
    '"commit_timestamp_nsecs": 1796299831800605698, "custom_metadata": {}}',
}


# parse_step ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("step_100", 100),
        ("step-100", 100),
        ("Step_100", 100),
        ("step100", 100),
        ("global_step100", 100),
        ("checkpoint-100", 100),
        ("checkpoint_100", 100),
        ("100", 100),
        ("0", 0),
        ("ckpt_100.pt", 100),
        ("ckpt-100.pth", 100),
        ("model_100.safetensors", 100),
        ("state_100.tar.gz", 100),
        ("iter_0000100", 100),
        ("epoch_3_step_100", 100),
        ("model_v2_100.bin", 100),
    ],
)
def test_parse_step_reads_the_number_that_ends_a_step_name(name: str, expected: int) -> None:
    """A name whose stem ends in a number after an optional prefix and separator holds that step."""
    assert expected == parse_step(name)


@pytest.mark.parametrize(
    "name",
    [
        "step_100.tmp",
        "step_100.partial",
        "ckpt_100.pt.tmp",
        "ckpt_100.pt.partial",
        "step_100.incomplete",
        "100.orbax-checkpoint-tmp-1712345678",
        "step_100.orbax-checkpoint-tmp-42",
        ".step_100.tmp-1a2b3c4d",
        ".step_100.old-1a2b3c4d",
        ".100",
        ".metadata",
        "tmp-checkpoint-100",
        "tmp_100",
    ],
)
def test_parse_step_rejects_temporary_and_hidden_entries(name: str) -> None:
    """Entries still being written, or hidden, never hold a step."""
    assert None is parse_step(name)


@pytest.mark.parametrize(
    "name",
    ["latest", "step_", "checkpoint", "zero_to_fp32.py", "run2", "v2", "100abc", "step_100.5", "2024_100",
     "step_100.", "COMMITTED", "trainer_state.json", "", "-100", "step 100"],
)
def test_parse_step_rejects_names_without_a_step(name: str) -> None:
    """Names that do not end in a separated number are not checkpoints."""
    assert None is parse_step(name)


# choose_latest ------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param([], None, id="empty"),
        pytest.param([file("latest"), file("README.md")], None, id="no-step-names"),
        pytest.param(
            [directory("step_100", "COMMITTED"), directory("step_300", "COMMITTED"), directory("step_200", "COMMITTED")],
            Checkpoint(Path("step_300"), 300),
            id="highest-step-wins",
        ),
        pytest.param(
            [directory("step_9", "COMMITTED"), directory("step_10", "COMMITTED")],
            Checkpoint(Path("step_10"), 10),
            id="numeric-not-lexical",
        ),
        pytest.param(
            [directory("step_100", "COMMITTED"), directory("step_200")],
            Checkpoint(Path("step_100"), 100),
            id="unmarked-newest-falls-back",
        ),
        pytest.param(
            [directory("step_100", "COMMITTED"), directory("step_200", "model.pt"), directory("step_300")],
            Checkpoint(Path("step_100"), 100),
            id="falls-back-past-several",
        ),
        pytest.param([directory("step_200")], None, id="only-unmarked"),
        pytest.param(
            [directory("step_100", "COMMITTED"), directory("step_200.tmp", "COMMITTED")],
            Checkpoint(Path("step_100"), 100),
            id="tmp-never-chosen",
        ),
        pytest.param(
            [file("ckpt_100.pt"), file("ckpt_200.pt.partial")],
            Checkpoint(Path("ckpt_100.pt"), 100),
            id="partial-never-chosen",
        ),
        pytest.param(
            [directory("100", "commit_success.txt"), directory("200.orbax-checkpoint-tmp-1712", "commit_success.txt")],
            Checkpoint(Path("100"), 100),
            id="orbax-tmp-never-chosen",
        ),
        pytest.param(
            [directory("step_100", "COMMITTED"), directory(".step_200.tmp-ab12cd34", "COMMITTED")],
            Checkpoint(Path("step_100"), 100),
            id="our-hidden-tmp-never-chosen",
        ),
        pytest.param([directory("100", "commit_success.txt")], Checkpoint(Path("100"), 100), id="orbax-marker"),
        pytest.param([directory("step_100", ".metadata")], Checkpoint(Path("step_100"), 100), id="dcp-marker"),
        pytest.param(
            [directory("step_100", "COMMITTED"), file("ckpt_200.pt")],
            Checkpoint(Path("ckpt_200.pt"), 200),
            id="plain-file-is-complete",
        ),
        pytest.param(
            [file("model_5.safetensors"), file("model_7.safetensors"), file("latest")],
            Checkpoint(Path("model_7.safetensors"), 7),
            id="plain-files-only",
        ),
    ],
)
def test_choose_latest_picks_the_complete_entry_with_the_highest_step(
    entries: list[Entry], expected: Checkpoint | None
) -> None:
    """The highest step wins among complete entries; temporary and unmarked ones are skipped."""
    assert expected == choose_latest(entries)


def test_choose_latest_breaks_step_ties_by_name_whatever_the_listing_order() -> None:
    """Two complete entries with one step give the same answer in any order."""
    entries = [file("ckpt_100.pt"), directory("step_100", "COMMITTED")]
    assert choose_latest(entries) == choose_latest(list(reversed(entries)))


# is_transient -------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OSError(errno.ESTALE, "Stale file handle"), True),
        (OSError(errno.EIO, "Input/output error"), True),
        (OSError(errno.EAGAIN, "Resource temporarily unavailable"), True),
        (OSError(errno.EINTR, "Interrupted system call"), True),
        (OSError(errno.ETIMEDOUT, "Connection timed out"), True),
        (PermissionError(errno.EACCES, "Permission denied"), False),
        (FileNotFoundError(errno.ENOENT, "No such file"), False),
        (NotADirectoryError(errno.ENOTDIR, "Not a directory"), False),
        (ValueError("not an OSError"), False),
    ],
)
def test_is_transient_retries_only_network_file_system_hiccups(error: BaseException, expected: bool) -> None:
    """ESTALE, EIO, EAGAIN, EINTR and ETIMEDOUT are retried; other errors are not."""
    assert expected == is_transient(error)


# find_latest --------------------------------------------------------------


def test_find_latest_of_a_missing_directory_is_a_fresh_start(tmp_path: Path) -> None:
    """A checkpoint directory that does not exist yet means there is nothing to resume."""
    assert None is find_latest(tmp_path / "not-yet")


def test_find_latest_of_an_empty_directory_is_a_fresh_start(tmp_path: Path) -> None:
    """An empty checkpoint directory means there is nothing to resume."""
    assert None is find_latest(tmp_path)


def test_find_latest_of_a_file_raises_a_one_line_error_naming_it(tmp_path: Path) -> None:
    """A file where the directory should be is reported with its path and the problem."""
    target = tmp_path / "ckpts"
    target.write_text("oops")
    with pytest.raises(CheckpointDirError) as caught:
        find_latest(target)
    assert f"checkpoint directory {target}: not a directory" == str(caught.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 directory anyway")
def test_find_latest_of_an_unreadable_directory_raises_a_one_line_error(tmp_path: Path) -> None:
    """A directory we may not read is reported with its path and the problem."""
    target = tmp_path / "ckpts"
    target.mkdir()
    target.chmod(0)
    try:
        with pytest.raises(CheckpointDirError) as caught:
            find_latest(target)
    finally:
        target.chmod(0o700)
    assert f"checkpoint directory {target}: permission denied" == str(caught.value)


def test_find_latest_returns_the_absolute_path_and_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative directory still yields an absolute checkpoint path."""
    committed_dir(tmp_path, "step_100")
    monkeypatch.chdir(tmp_path.parent)
    assert Checkpoint(tmp_path / "step_100", 100) == find_latest(Path(tmp_path.name))


def test_find_latest_falls_back_past_an_unmarked_newest_directory(tmp_path: Path) -> None:
    """A newest directory without a commit marker (a crashed save) yields the previous step."""
    committed_dir(tmp_path, "step_100")
    committed_dir(tmp_path, "step_200", marker="model-extra.pt")
    (tmp_path / "step_300.tmp").mkdir()
    (tmp_path / "300.orbax-checkpoint-tmp-99").mkdir()
    assert Checkpoint(tmp_path / "step_100", 100) == find_latest(tmp_path)


@pytest.mark.parametrize("marker", COMMIT_MARKERS)
def test_find_latest_accepts_each_commit_marker(tmp_path: Path, marker: str) -> None:
    """COMMITTED, Orbax's commit_success.txt and torch DCP's .metadata each complete a directory."""
    committed_dir(tmp_path, "checkpoint-7", marker=marker)
    assert Checkpoint(tmp_path / "checkpoint-7", 7) == find_latest(tmp_path)


def test_an_orbax_metadata_file_without_a_commit_is_no_marker(tmp_path: Path) -> None:
    """Orbax's commit-file mode creates ``N/_CHECKPOINT_METADATA`` before the data: only a recorded commit counts."""
    committed_dir(tmp_path, "100", marker="_CHECKPOINT_METADATA")
    writing = tmp_path / "200"
    (writing / "default").mkdir(parents=True)
    (writing / "_CHECKPOINT_METADATA").write_text(
        '{"item_handlers": {}, "metrics": {}, "init_timestamp_nsecs": 1796299831675087301, "custom_metadata": {}}'
    )
    selection = scan_checkpoints(tmp_path)
    assert Checkpoint(tmp_path / "100", 100) == selection.latest
    assert [("200", 200)] == [(r.name, r.step) for r in selection.rejected]
    assert "commit_timestamp_nsecs" in selection.rejected[0].reason
    (writing / "commit_success.txt").write_text("Checkpoint commit was successful")
    assert Checkpoint(writing, 200) == find_latest(tmp_path)


def test_find_latest_counts_a_plain_file_as_complete(tmp_path: Path) -> None:
    """A plain step-numbered file is complete: it was written by rename."""
    committed_dir(tmp_path, "step_100")
    (tmp_path / "ckpt_150.pt").write_bytes(b"weights")
    (tmp_path / "ckpt_200.pt.partial").write_bytes(b"wei")
    assert Checkpoint(tmp_path / "ckpt_150.pt", 150) == find_latest(tmp_path)


def test_find_latest_ignores_a_dangling_symlink(tmp_path: Path) -> None:
    """A step-numbered link to nothing is never chosen."""
    committed_dir(tmp_path, "step_100")
    (tmp_path / "step_200").symlink_to(tmp_path / "gone")
    assert Checkpoint(tmp_path / "step_100", 100) == find_latest(tmp_path)


def test_find_latest_ignores_a_marker_that_is_a_directory(tmp_path: Path) -> None:
    """Only a file named like a commit marker counts as one."""
    committed_dir(tmp_path, "step_100")
    (tmp_path / "step_200" / "COMMITTED").mkdir(parents=True)
    assert Checkpoint(tmp_path / "step_100", 100) == find_latest(tmp_path)


class FlakyScandir:
    """os.scandir that fails with ``errno_`` ``failures`` times, then lists for real."""

    def __init__(self, errno_: int, failures: int) -> None:
        self.errno = errno_
        self.failures = failures
        self.calls = 0
        self.real = os.scandir

    def __call__(self, path: Path) -> Iterator[os.DirEntry[str]]:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(self.errno, os.strerror(self.errno), str(path))
        return self.real(path)


def test_find_latest_retries_a_stale_file_handle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ESTALE twice, then success: the checkpoint is found."""
    committed_dir(tmp_path, "step_100")
    flaky = FlakyScandir(errno.ESTALE, failures=2)
    monkeypatch.setattr(os, "scandir", flaky)
    assert (Checkpoint(tmp_path / "step_100", 100), 3) == (find_latest(tmp_path), flaky.calls)


def test_find_latest_gives_up_on_a_persistent_io_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EIO on every attempt ends, after a bounded number of them, in a one-line error."""
    flaky = FlakyScandir(errno.EIO, failures=1000)
    monkeypatch.setattr(os, "scandir", flaky)
    with pytest.raises(CheckpointDirError) as caught:
        find_latest(tmp_path)
    expected = (f"checkpoint directory {tmp_path}: {os.strerror(errno.EIO)}", 4)
    assert expected == (str(caught.value), flaky.calls)


def test_find_latest_does_not_retry_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Permission denied is not transient: one attempt, then the error."""
    flaky = FlakyScandir(errno.EACCES, failures=1000)
    monkeypatch.setattr(os, "scandir", flaky)
    with pytest.raises(CheckpointDirError):
        find_latest(tmp_path)
    assert 1 == flaky.calls


# the worker-side helper ---------------------------------------------------


def test_worker_marker_is_one_the_launcher_accepts() -> None:
    """What elastic.worker writes is a marker elastic.run.watches.checkpoint_scan looks for."""
    assert COMMIT_MARKER in COMMIT_MARKERS


def test_worker_imports_only_the_standard_library() -> None:
    """Importing elastic.worker in a fresh interpreter loads no Ray, structlog, transitions or tenacity."""
    heavy = ["ray", "structlog", "transitions", "tenacity", "elastic.run.watches.checkpoint_scan", "psutil"]
    code = f"import sys, elastic.worker\nprint(sorted(m for m in {heavy!r} if m in sys.modules))\n"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "[]" == loaded.stdout.strip()


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"ELASTIC_RESUME_FROM": ""}, None),
        ({"ELASTIC_CHECKPOINT_DIR": "/ckpt"}, None),
        ({"ELASTIC_RESUME_FROM": "/ckpt/step_100", "ELASTIC_RESUME_STEP": "100"}, ResumePoint(Path("/ckpt/step_100"), 100)),
        ({"ELASTIC_RESUME_FROM": "/ckpt/ckpt_0.pt", "ELASTIC_RESUME_STEP": "0"}, ResumePoint(Path("/ckpt/ckpt_0.pt"), 0)),
    ],
)
def test_resume_point_reads_the_launcher_variables(environ: dict[str, str], expected: ResumePoint | None) -> None:
    """ELASTIC_RESUME_FROM and ELASTIC_RESUME_STEP give the resume point; without them it is a fresh start."""
    assert expected == resume_point(environ)


@pytest.mark.parametrize("step", ["", "-1", "ten", "1.5", "١٢"])
def test_resume_point_rejects_a_malformed_step(step: str) -> None:
    """A resume path with a missing or malformed step is an error naming the variable."""
    with pytest.raises(ValueError, match="ELASTIC_RESUME_STEP"):
        resume_point({"ELASTIC_RESUME_FROM": "/ckpt/step_1", "ELASTIC_RESUME_STEP": step})


def test_resume_point_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an explicit mapping the process environment is read."""
    monkeypatch.setenv("ELASTIC_RESUME_FROM", "/ckpt/step_3")
    monkeypatch.setenv("ELASTIC_RESUME_STEP", "3")
    assert ResumePoint(Path("/ckpt/step_3"), 3) == resume_point()


@pytest.mark.parametrize(
    ("environ", "expected"),
    [({}, None), ({"ELASTIC_CHECKPOINT_DIR": ""}, None), ({"ELASTIC_CHECKPOINT_DIR": "/ckpt"}, Path("/ckpt"))],
)
def test_checkpoint_dir_reads_the_launcher_variable(environ: dict[str, str], expected: Path | None) -> None:
    """ELASTIC_CHECKPOINT_DIR names the directory; unset or empty means none."""
    assert expected == checkpoint_dir(environ)


def test_atomic_checkpoint_commits_a_step_the_launcher_finds(tmp_path: Path) -> None:
    """A clean exit leaves step_N with the user's files and a COMMITTED marker, and nothing hidden."""
    with atomic_checkpoint(tmp_path / "ckpts", 12) as tmp:
        (tmp / "model.pt").write_bytes(b"weights")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "shard-0").write_bytes(b"shard")
    final = tmp_path / "ckpts" / "step_12"
    expected = (Checkpoint(final, 12), [".elastic-save-times.json", "COMMITTED", "model.pt", "sub"], ["step_12"], "12\n")
    actual = (
        find_latest(tmp_path / "ckpts"),
        sorted(os.listdir(final)),
        os.listdir(tmp_path / "ckpts"),
        (final / "COMMITTED").read_text(),
    )
    assert expected == actual


def test_atomic_checkpoint_writes_into_a_hidden_temporary_directory(tmp_path: Path) -> None:
    """Inside the block the files are in .step_N.tmp-*, a name the launcher never chooses."""
    with atomic_checkpoint(tmp_path, 5) as tmp:
        seen = (tmp.parent, tmp.name.startswith(".step_5.tmp-"), parse_step(tmp.name), find_latest(tmp_path))
    assert (tmp_path, True, None, None) == seen


def test_atomic_checkpoint_removes_the_temporary_directory_on_error(tmp_path: Path) -> None:
    """An exception in the block commits nothing, keeps the previous step, and is re-raised."""
    save_json_checkpoint(tmp_path, 1, {"step": 1})
    with pytest.raises(RuntimeError, match="disk on fire"):
        with atomic_checkpoint(tmp_path, 2) as tmp:
            (tmp / "model.pt").write_bytes(b"half")
            raise RuntimeError("disk on fire")
    assert (["step_1"], Checkpoint(tmp_path / "step_1", 1)) == (os.listdir(tmp_path), find_latest(tmp_path))


def test_atomic_checkpoint_replaces_an_existing_step(tmp_path: Path) -> None:
    """Saving a step twice leaves only the second save, and no hidden leftovers."""
    with atomic_checkpoint(tmp_path, 3) as tmp:
        (tmp / "old.pt").write_bytes(b"old")
    with atomic_checkpoint(tmp_path, 3) as tmp:
        (tmp / "new.pt").write_bytes(b"new")
    expected = (["step_3"], [".elastic-save-times.json", "COMMITTED", "new.pt"])
    assert expected == (os.listdir(tmp_path), sorted(os.listdir(tmp_path / "step_3")))


def test_atomic_checkpoint_replaces_a_plain_file_of_the_same_name(tmp_path: Path) -> None:
    """A stray file named step_N is moved aside and removed, not merged into."""
    (tmp_path / "step_3").write_text("stray")
    with atomic_checkpoint(tmp_path, 3) as tmp:
        (tmp / "model.pt").write_bytes(b"w")
    assert (["step_3"], [".elastic-save-times.json", "COMMITTED", "model.pt"]) == (os.listdir(tmp_path), sorted(os.listdir(tmp_path / "step_3")))


def test_atomic_checkpoint_honours_the_umask(tmp_path: Path) -> None:
    """The committed directory gets the usual mode (0777 less the umask), not mkdtemp's 0700."""
    old = os.umask(0o022)
    try:
        with atomic_checkpoint(tmp_path, 4):
            pass
    finally:
        os.umask(old)
    assert 0o755 == (tmp_path / "step_4").stat().st_mode & 0o777


@pytest.mark.parametrize("step", [-1, True, 1.0, "3"])
def test_atomic_checkpoint_rejects_a_bad_step_before_touching_the_disk(tmp_path: Path, step: object) -> None:
    """A step that is not a non-negative integer is an error, and nothing is created."""
    with pytest.raises(ValueError, match="step="):
        with atomic_checkpoint(tmp_path / "ckpts", step):  # type: ignore[arg-type]
            pass
    assert not (tmp_path / "ckpts").exists()


def test_save_json_checkpoint_round_trips_through_resume(tmp_path: Path) -> None:
    """A small JSON state saved for step N is found at step N and reads back equal."""
    state = {"step": 40, "lr": 0.001, "seen": [1, 2, 3]}
    final = save_json_checkpoint(tmp_path, 40, state)
    found = find_latest(tmp_path)
    assert found is not None
    actual = (final, found.step, json.loads((found.path / "state.json").read_text()))
    assert (tmp_path / "step_40", 40, state) == actual


def test_save_json_checkpoint_of_unserialisable_data_leaves_nothing(tmp_path: Path) -> None:
    """Data JSON cannot encode fails before anything is written."""
    with pytest.raises(TypeError):
        save_json_checkpoint(tmp_path, 1, {"bad": object()})
    assert [] == os.listdir(tmp_path)


def test_atomic_checkpoint_leaves_when_its_save_began_and_was_committed_for_the_drain_to_list(tmp_path: Path) -> None:
    """The driver lists the saves committed since its last drain (the goodput ledger's checkpoint time)."""
    import time

    from elastic.node.clock import SystemClock
    from elastic.run.watches import checkpoints
    from elastic.worker import checkpoint as worker_checkpoint

    assert checkpoints.SAVE_TIMES == worker_checkpoint.SAVE_TIMES
    before = time.time()
    with atomic_checkpoint(tmp_path, 10) as tmp:
        (tmp / "model.pt").write_text("x")
        time.sleep(0.05)
    between = time.time()
    with atomic_checkpoint(tmp_path, 20) as tmp:
        (tmp / "model.pt").write_text("y")
    (tmp_path / "step_30").mkdir()  # a step saved some other way: no times
    watch = checkpoints.CheckpointWatch(tmp_path, None, write=lambda _: None, clock=SystemClock(), run_id="r")
    saves = watch.saves_since(before)
    assert len(saves) == 2 and before <= saves[0][0] <= saves[0][1] - 0.05 and saves[1][0] >= between
    assert len(watch.saves_since(between)) == 1
