"""The latest write under a checkpoint directory: found in a save's new directory however many
shards the kept checkpoints hold, at a bounded cost."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from elastic.node.watchers.steps import latest_write

KEPT, SHARDS = 5, 1024  # five kept checkpoints of 1,024 shards: more than the walk's 4,096 entries
OLD, SAVE_STARTED, WRITTEN = 1000.0, 2000.0, 5000.0


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint directory with KEPT complete checkpoints, every file and folder of time OLD."""
    root = tmp_path_factory.mktemp("ckpt")
    for index in range(1, KEPT + 1):
        step = root / f"step_{index * 100}"
        step.mkdir()
        for shard in range(SHARDS):
            path = step / f"shard-{shard:05d}.safetensors"
            path.touch()
            os.utime(path, (OLD, OLD))
        os.utime(step, (OLD, OLD))
    os.utime(root, (OLD, OLD))
    return root


@pytest.mark.parametrize("name", [f"step_{step}" for step in range(600, 2600, 100)])
def test_a_save_into_a_new_step_directory_is_seen_past_thousands_of_kept_shards(kept: Path, name: str) -> None:
    """Whatever the new directory's name (the listing's order is the file system's), the walk
    looks into it first: the shard it is writing is the latest write. Twenty names: a walk in
    listing order missed those listed before most of the kept checkpoints."""
    saving = kept / name
    saving.mkdir()
    shard = saving / "shard-00000.safetensors"
    try:
        shard.touch()
        os.utime(shard, (WRITTEN, WRITTEN))  # written in place since the directory last changed
        os.utime(saving, (SAVE_STARTED, SAVE_STARTED))
        os.utime(kept, (SAVE_STARTED, SAVE_STARTED))
        assert WRITTEN == latest_write(str(kept))
    finally:
        shard.unlink()
        saving.rmdir()
        os.utime(kept, (OLD, OLD))


def test_the_walk_stops_at_its_budget(kept: Path) -> None:
    """A budget of one directory's entries: the newest directory is looked into, the rest not."""
    newest = kept / "step_500" / "shard-00007.safetensors"
    os.utime(newest, (WRITTEN, WRITTEN))
    os.utime(kept / "step_500", (SAVE_STARTED, SAVE_STARTED))
    try:
        assert WRITTEN == latest_write(str(kept), budget=KEPT + SHARDS)
        assert SAVE_STARTED == latest_write(str(kept), budget=KEPT)  # the top level only
    finally:
        os.utime(newest, (OLD, OLD))
        os.utime(kept / "step_500", (OLD, OLD))


def test_a_missing_directory_has_no_latest_write(tmp_path: Path) -> None:
    assert latest_write(str(tmp_path / "missing")) is None
