"""examples/torch_dcp.py under the launcher: DCP step_N folders with DDP and FSDP2, a rank SIGKILLed from outside."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from harness import REPO, Launcher, differing_tensors, kill_beside_an_uninterrupted_run

from elastic.run.watches.checkpoint_scan import scan_checkpoints

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

EXAMPLE = REPO / "examples" / "torch_dcp.py"
STEPS, CHECKPOINT_EVERY, KILL_AT_STEP = 10, 5, 7
STEP_PAUSE_S = 0.2  # steps 7-9 give the kill 0.6 s to land before step_10 is saved


def _command(tmp_path: Path, parallel: str, name: str) -> list[object]:
    return [
        sys.executable, EXAMPLE, "--parallel", parallel, "--output", tmp_path / f"final{name}.pt",
        "--steps", STEPS, "--checkpoint-every", CHECKPOINT_EVERY, "--step-pause", STEP_PAUSE_S,
    ]


def _options(tmp_path: Path, name: str) -> list[object]:
    return ["--nproc-per-node", 2, "--max-restarts", 3, "--checkpoint-dir", tmp_path / f"ckpt{name}"]


def _latest_dcp_checkpoint(directory: Path) -> int | None:
    """DCP's own notion of a complete save: a step_N whose metadata its reader can read."""
    steps = []
    for path in directory.glob("step_*"):
        try:
            dcp.FileSystemReader(path).read_metadata()
        except (OSError, EOFError, ValueError):
            continue
        steps.append(int(path.name.removeprefix("step_")))
    return max(steps, default=None)


# Three launches, each importing torch and DCP in 2 ranks: 20-35 s on an idle 2-core
# machine, past the suite's 120 s default on a shared one; every wait inside is bounded anyway.
@pytest.mark.timeout(300)
@pytest.mark.parametrize("parallel", ["ddp", "fsdp2"])
def test_a_dcp_run_resumed_after_a_sigkill_ends_bit_identical_to_an_uninterrupted_one(
    launcher: Launcher, tmp_path: Path, parallel: str
) -> None:
    """Rank 1 SIGKILLed after step 7 resumes every rank from DCP's step_5, and the final weights
    match an uninterrupted run's to the bit."""
    runs = kill_beside_an_uninterrupted_run(
        launcher, tmp_path, lambda name: _options(tmp_path, name), lambda name: _command(tmp_path, parallel, name),
        rank=1, step=KILL_AT_STEP, latest_checkpoint=lambda: _latest_dcp_checkpoint(tmp_path / "ckptB"),
    )

    runs.assert_resumed_once_from(rank=1, resume_step=CHECKPOINT_EVERY)
    for rank in (0, 1):
        assert f"first_step={CHECKPOINT_EVERY + 1}" in runs.interrupted.rank_log(1, rank)
    assert [] == differing_tensors(tmp_path / "finalA.pt", tmp_path / "finalB.pt")


class _Died(Exception):
    """The writer's process died here (what a SIGKILL between DCP's last two moves leaves)."""


class _DiesBeforeCommit(dcp.FileSystemWriter):  # type: ignore[misc]
    """DCP's own file system writer, stopped between writing ``.metadata.tmp`` and renaming it."""

    def finish(self, metadata: Any, results: Any) -> None:
        def die(*args: object) -> None:
            raise _Died("killed before the rename")

        self.fs.rename = die
        super().finish(metadata, results)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # a single process saves on purpose
def test_a_dcp_save_cut_short_before_its_metadata_is_never_resumed_from(tmp_path: Path) -> None:
    """A step_N whose shards and .metadata.tmp DCP wrote, but not .metadata, is passed over for the older save."""

    state = {"weights": torch.arange(8.0), "step": torch.tensor(5)}
    dcp.save(state, checkpoint_id=tmp_path / "step_5", no_dist=True)
    with pytest.raises(dcp.api.CheckpointException, match="killed before the rename"):
        dcp.save(state, storage_writer=_DiesBeforeCommit(tmp_path / "step_10"), no_dist=True)
    assert {".metadata.tmp", "__0_0.distcp"} == {p.name for p in (tmp_path / "step_10").iterdir()}

    selection = scan_checkpoints(tmp_path)

    assert selection.latest is not None
    assert (tmp_path / "step_5", 5) == (selection.latest.path, selection.latest.step)
    assert [("step_10", 10)] == [(r.name, r.step) for r in selection.rejected]
