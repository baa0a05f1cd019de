"""Only complete checkpoints: step-shaped names, checkpoint extensions, structures that check out.

Files here are real: written with torch.save, in the safetensors, .npy and
pickle formats by hand, then cut short as a rank killed mid-write leaves them.
Where torch is not installed only the tests of files torch writes are skipped.
"""

from __future__ import annotations

import json
import pickle
import re
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from elastic.core.checkpoints.selection import Checkpoint, Rejection
from elastic.run.watches.checkpoint_scan import find_latest, scan_checkpoints
from elastic.core.checkpoints.names import StepName, parse_checkpoint_pattern, parse_name

try:
    import torch
except ImportError:  # torch is optional: only the tests of files torch writes need it
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def torch_save(path: Path, obj: object) -> Path:
    torch.save(obj, path)
    return path


def truncate(path: Path, keep: float = 0.5) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def safetensors(path: Path, tensors: dict[str, int]) -> Path:
    """A safetensors file by the format's definition: header length, JSON header, data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, size in tensors.items():
        header[name] = {"dtype": "U8", "shape": [size], "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + bytes(offset))
    return path


def lightning_ckpt(path: Path, global_step: int) -> Path:
    """What Lightning's trainer.save_checkpoint writes: a torch.save of this dict."""
    return torch_save(path, {"epoch": 0, "global_step": global_step, "pytorch-lightning_version": "2.4.0",
                             "state_dict": {"layer.weight": torch.zeros(64)}, "loops": {}})


# names ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "is_dir", "expected"),
    [
        ("epoch=0-step=120.ckpt", False, StepName(120)),
        ("step=120.ckpt", False, StepName(120)),
        ("epoch=0-step=120-v1.ckpt", False, StepName(120, 1)),
        ("epoch=2-step=300-val_loss=0.35.ckpt", False, StepName(300)),
        ("epoch=3.ckpt", False, StepName(3)),
        ("ckpt_100-v2.pt", False, StepName(100, 2)),
        ("checkpoint.100.pth.tar", False, None),
        ("ckpt_100.pth.tar", False, StepName(100)),
        ("state_100.tar.gz", False, StepName(100)),
        ("step_20241203.pt", False, StepName(20241203)),
        ("run_20241203_step_100", True, StepName(100)),
        ("checkpoint-100", True, StepName(100)),
        ("global_step100", True, StepName(100)),
        ("model_v2_100.bin", False, StepName(100)),
    ],
)
def test_step_shaped_names_hold_their_step(name: str, is_dir: bool, expected: StepName) -> None:
    """Lightning's names, -vN copies, labelled and plain-word names give their step."""
    assert expected == parse_name(name, is_dir=is_dir)


@pytest.mark.parametrize(
    ("name", "is_dir"),
    [
        ("train_20241203.log", False),
        ("train_20241203.pt", False),
        ("run-2024-12-03", True),
        ("run_2024_12_03.pt", False),
        ("config_2.yaml", False),
        ("config_2.pt", False),
        ("version_3", True),
        ("model_v_2.pt", False),
        ("model-1.2.3.pt", False),
        ("rank_1.pt", False),
        ("model-00001-of-00004.safetensors", False),
        ("ckpt_100", False),
        ("100", False),
        ("ckpt_100.json", False),
        ("ckpt_100.log.gz", False),
        ("notes-3.txt", False),
        ("loss=0.5.ckpt", False),
        ("last.ckpt", False),
    ],
)
def test_dates_configs_versions_and_other_extensions_are_not_steps(name: str, is_dir: bool) -> None:
    """Numbers of dates, configs, versions, ranks or shards, and files without a checkpoint extension, are not steps."""
    assert None is parse_name(name, is_dir=is_dir)


def test_a_user_pattern_replaces_the_built_in_names() -> None:
    """--checkpoint-pattern names a layout of its own; its step group gives the step."""
    pattern = parse_checkpoint_pattern(r"weights-(?P<step>[0-9]+)k")
    assert (StepName(12), None, None) == (
        parse_name("weights-12k", is_dir=False, pattern=pattern),
        parse_name("step_100.pt", is_dir=False, pattern=pattern),
        parse_name(".weights-13k", is_dir=False, pattern=pattern),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [("weights-(", "must be a regular expression"), (r"weights-([0-9]+)", "named group for the step")],
)
def test_a_pattern_that_is_no_regex_or_has_no_step_group_is_refused(text: str, message: str) -> None:
    """A one-line reason, before anything launches."""
    with pytest.raises(ValueError, match=message) as caught:
        parse_checkpoint_pattern(text)
    assert "\n" not in str(caught.value)


def test_the_rules_modules_load_nothing_effectful() -> None:
    """Naming and format rules are pure: no Ray, no logging, no retries, no scan."""
    code = (
        "import sys, elastic.core.checkpoints.names, elastic.core.checkpoints.formats, elastic.core.checkpoints.dirs\n"
        "print(sorted(m for m in ['ray', 'structlog', 'tenacity', 'elastic.run.watches.checkpoint_scan', 'subprocess']"
        " if m in sys.modules))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "[]" == loaded.stdout.strip()


# torch.save files ---------------------------------------------------------


@needs_torch
def test_a_torn_torch_save_is_rejected_and_the_older_one_chosen(tmp_path: Path) -> None:
    """A good ckpt_10.pt and a ckpt_20.pt cut off mid-write: step 10, and ckpt_20.pt rejected with a reason."""
    torch_save(tmp_path / "ckpt_10.pt", {"step": 10, "w": torch.ones(1000)})
    truncate(torch_save(tmp_path / "ckpt_20.pt", {"step": 20, "w": torch.ones(1000)}))
    selection = scan_checkpoints(tmp_path)
    assert Checkpoint(tmp_path / "ckpt_10.pt", 10) == selection.latest
    assert [("ckpt_20.pt", 20)] == [(r.name, r.step) for r in selection.rejected]
    assert "no zip end-of-central-directory record" in selection.rejected[0].reason


@needs_torch
@pytest.mark.parametrize("keep", [0.0, 0.01, 0.5, 0.99])
def test_a_torch_save_cut_anywhere_is_rejected(tmp_path: Path, keep: float) -> None:
    """Cut at any length, down to empty, a torch.save file is never chosen."""
    truncate(torch_save(tmp_path / "ckpt_20.pt", {"w": torch.ones(5000)}), keep)
    selection = scan_checkpoints(tmp_path)
    assert (None, ["ckpt_20.pt"]) == (selection.latest, [r.name for r in selection.rejected])


@needs_torch
def test_a_whole_torch_save_with_a_zip_comment_is_accepted(tmp_path: Path) -> None:
    """The end record is found behind a zip comment too."""
    path = torch_save(tmp_path / "ckpt_5.pt", {"w": torch.ones(10)})
    with zipfile.ZipFile(path, "a") as archive:
        archive.comment = b"written by a tool that comments"
    assert Checkpoint(path, 5) == find_latest(tmp_path)


@needs_torch
def test_log_config_and_date_names_are_ignored_beside_checkpoints(tmp_path: Path) -> None:
    """train_20241203.log, config_2.yaml and run-2024-12-03/ never become the resume point."""
    torch_save(tmp_path / "ckpt_10.pt", {"step": 10})
    (tmp_path / "train_20241203.log").write_text("loss 1.0\n")
    (tmp_path / "config_2.yaml").write_text("lr: 0.1\n")
    (tmp_path / "run-2024-12-03").mkdir()
    (tmp_path / "run-2024-12-03" / "COMMITTED").write_text("")
    selection = scan_checkpoints(tmp_path)
    expected = (Checkpoint(tmp_path / "ckpt_10.pt", 10), (), ("config_2.yaml", "run-2024-12-03", "train_20241203.log"))
    assert expected == (selection.latest, selection.rejected, selection.unrecognised)
    assert not selection.recognised_none


def test_a_directory_with_entries_but_no_checkpoint_says_so(tmp_path: Path) -> None:
    """Entries, none named like a checkpoint: nothing chosen, nothing rejected, the names listed."""
    for name in ("rank-0.json", "train.log", "weights.pt"):
        (tmp_path / name).write_text("x")
    (tmp_path / ".hidden").write_text("x")
    selection = scan_checkpoints(tmp_path)
    assert (True, ("rank-0.json", "train.log", "weights.pt")) == (selection.recognised_none, selection.unrecognised)


def test_an_empty_directory_is_not_a_layout_problem(tmp_path: Path) -> None:
    """No entries at all is a fresh start, not a warning."""
    assert not scan_checkpoints(tmp_path).recognised_none


# safetensors, npy, pickles ---------------------------------------------------


def test_safetensors_whole_is_chosen_and_torn_is_rejected(tmp_path: Path) -> None:
    """The header's length and last data offset must end where the file does."""
    safetensors(tmp_path / "model_100.safetensors", {"a": 100, "b": 50})
    torn = safetensors(tmp_path / "model_200.safetensors", {"a": 100, "b": 50})
    torn.write_bytes(torn.read_bytes()[:-10])
    cut_in_header = safetensors(tmp_path / "model_300.safetensors", {"a": 100})
    cut_in_header.write_bytes(cut_in_header.read_bytes()[:20])
    selection = scan_checkpoints(tmp_path)
    assert Checkpoint(tmp_path / "model_100.safetensors", 100) == selection.latest
    reasons = {r.name: r.reason for r in selection.rejected}
    assert ["model_200.safetensors", "model_300.safetensors"] == sorted(reasons)
    assert "describes" in reasons["model_200.safetensors"]
    assert "header needs" in reasons["model_300.safetensors"]


def test_npy_and_pickle_checks(tmp_path: Path) -> None:
    """A .npy of the size its header says and a pickle ending in STOP are whole; cut ones are not."""
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }"
    header += b" " * (64 - 10 - len(header) - 1) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(16)
    (tmp_path / "w_1.npy").write_bytes(npy)
    (tmp_path / "w_2.npy").write_bytes(npy[:-4])
    (tmp_path / "state_3.pkl").write_bytes(pickle.dumps({"w": list(range(100))}, protocol=4))
    (tmp_path / "state_4.pkl").write_bytes(pickle.dumps({"w": list(range(100))}, protocol=4)[:-3])
    selection = scan_checkpoints(tmp_path)
    assert Checkpoint(tmp_path / "state_3.pkl", 3) == selection.latest
    assert ["state_4.pkl"] == [r.name for r in selection.rejected]
    (tmp_path / "state_3.pkl").unlink()
    (tmp_path / "state_4.pkl").unlink()
    assert Checkpoint(tmp_path / "w_1.npy", 1) == find_latest(tmp_path)


def test_a_file_in_an_unknown_format_is_taken_on_its_name(tmp_path: Path) -> None:
    """msgpack, HDF5 and the like cannot be checked cheaply: name and extension decide; empty never."""
    (tmp_path / "params_7.msgpack").write_bytes(b"\x81\xa1w\x01")
    (tmp_path / "params_8.msgpack").write_bytes(b"")
    selection = scan_checkpoints(tmp_path)
    assert (Checkpoint(tmp_path / "params_7.msgpack", 7), [Rejection("params_8.msgpack", 8, "empty file")]) == (
        selection.latest, list(selection.rejected))


# Lightning -------------------------------------------------------------------


@needs_torch
def test_lightning_default_names_resume(tmp_path: Path) -> None:
    """epoch=0-step=120.ckpt is step 120; its -v1 copy of the same step ranks above it."""
    lightning_ckpt(tmp_path / "epoch=0-step=60.ckpt", 60)
    lightning_ckpt(tmp_path / "epoch=0-step=120.ckpt", 120)
    lightning_ckpt(tmp_path / "epoch=0-step=120-v1.ckpt", 120)
    assert Checkpoint(tmp_path / "epoch=0-step=120-v1.ckpt", 120) == find_latest(tmp_path)


@needs_torch
def test_lightning_last_ckpt_ranks_by_the_step_stored_in_it(tmp_path: Path) -> None:
    """last.ckpt holds no step in its name: its global_step is read, without unpickling, and ranked."""
    lightning_ckpt(tmp_path / "epoch=0-step=60.ckpt", 60)
    lightning_ckpt(tmp_path / "last.ckpt", 90)
    assert Checkpoint(tmp_path / "last.ckpt", 90) == find_latest(tmp_path)


@needs_torch
def test_lightning_step_named_file_wins_a_tie_with_last_ckpt(tmp_path: Path) -> None:
    """At the same step the step-named file is chosen; last.ckpt is the same state."""
    lightning_ckpt(tmp_path / "epoch=0-step=120.ckpt", 120)
    lightning_ckpt(tmp_path / "last.ckpt", 120)
    assert Checkpoint(tmp_path / "epoch=0-step=120.ckpt", 120) == find_latest(tmp_path)


@needs_torch
def test_lightning_last_ckpt_alone_resumes(tmp_path: Path) -> None:
    """save_top_k=0, save_last=True: last.ckpt is the resume point, at its stored step."""
    lightning_ckpt(tmp_path / "last.ckpt", 42)
    assert Checkpoint(tmp_path / "last.ckpt", 42) == find_latest(tmp_path)


@needs_torch
def test_a_torn_or_stepless_last_ckpt_is_rejected(tmp_path: Path) -> None:
    """last.ckpt cut mid-write, or with no global_step in it, is passed over with its reason."""
    lightning_ckpt(tmp_path / "epoch=0-step=60.ckpt", 60)
    truncate(lightning_ckpt(tmp_path / "last.ckpt", 90))
    selection = scan_checkpoints(tmp_path)
    assert Checkpoint(tmp_path / "epoch=0-step=60.ckpt", 60) == selection.latest
    assert [("last.ckpt", 90)] == [(r.name, r.step) for r in selection.rejected]
    assert "torn" in selection.rejected[0].reason
    torch_save(tmp_path / "last.ckpt", {"weights": torch.ones(3)})
    assert "no global_step" in scan_checkpoints(tmp_path).rejected[0].reason


@needs_torch
def test_a_pattern_finds_a_layout_of_its_own(tmp_path: Path) -> None:
    """With --checkpoint-pattern the user's names count, structure is still checked, built-ins do not."""
    torch_save(tmp_path / "weights-10k", {"w": 1})
    truncate(torch_save(tmp_path / "weights-20k", {"w": torch.ones(100)}))
    torch_save(tmp_path / "step_99.pt", {"w": 1})
    selection = scan_checkpoints(tmp_path, re.compile(r"weights-(?P<step>[0-9]+)k"))
    assert (Checkpoint(tmp_path / "weights-10k", 10), ["weights-20k"], ("step_99.pt",)) == (
        selection.latest, [r.name for r in selection.rejected], selection.unrecognised)


# Hugging Face Trainer checkpoint-N directories -------------------------------


def hf_checkpoint(parent: Path, step: int, *, shards: int = 2, processes: int = 2) -> Path:
    """A Trainer checkpoint-N: sharded safetensors with their index, optimizer, per-process rng, state."""
    path = parent / f"checkpoint-{step}"
    path.mkdir()
    weight_map = {}
    for index in range(1, shards + 1):
        shard = f"model-{index:05d}-of-{shards:05d}.safetensors"
        safetensors(path / shard, {f"layer{index}.weight": 64})
        weight_map[f"layer{index}.weight"] = shard
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    torch_save(path / "optimizer.pt", {"state": {}, "param_groups": []})
    for rank in range(processes):
        torch_save(path / f"rng_state_{rank}.pth", {"cpu": torch.ones(4)})
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    return path


@needs_torch
def test_a_whole_trainer_checkpoint_is_chosen(tmp_path: Path) -> None:
    """Every shard listed, every file whole, trainer_state.json valid: complete."""
    hf_checkpoint(tmp_path, 10)
    hf_checkpoint(tmp_path, 20)
    assert Checkpoint(tmp_path / "checkpoint-20", 20) == find_latest(tmp_path)


def hf_reason(tmp_path: Path) -> str:
    selection = scan_checkpoints(tmp_path)
    assert Checkpoint(tmp_path / "checkpoint-10", 10) == selection.latest
    assert ["checkpoint-20"] == [r.name for r in selection.rejected]
    return selection.rejected[0].reason


@needs_torch
def test_trainer_state_alone_does_not_commit_a_sharded_save(tmp_path: Path) -> None:
    """An index naming a shard that is not there: the save is incomplete despite trainer_state.json."""
    hf_checkpoint(tmp_path, 10)
    (hf_checkpoint(tmp_path, 20) / "model-00002-of-00002.safetensors").unlink()
    assert "lists model-00002-of-00002.safetensors, which is missing" in hf_reason(tmp_path)


@needs_torch
def test_a_torn_rng_state_of_another_process_rejects_the_trainer_checkpoint(tmp_path: Path) -> None:
    """Process 1's rng_state_1.pth cut off after process 0 wrote trainer_state.json: incomplete."""
    hf_checkpoint(tmp_path, 10)
    truncate(hf_checkpoint(tmp_path, 20) / "rng_state_1.pth")
    assert hf_reason(tmp_path).startswith("rng_state_1.pth: torn")


@needs_torch
def test_a_cut_trainer_state_rejects_the_trainer_checkpoint(tmp_path: Path) -> None:
    """trainer_state.json is not written atomically: cut off, it is no marker."""
    hf_checkpoint(tmp_path, 10)
    truncate(hf_checkpoint(tmp_path, 20) / "trainer_state.json")
    assert "trainer_state.json is cut off" in hf_reason(tmp_path)


@needs_torch
def test_fsdp_sharded_state_needs_its_metadata(tmp_path: Path) -> None:
    """FSDP's pytorch_model_fsdp_0/ (torch.distributed.checkpoint) is whole only with .metadata."""
    hf_checkpoint(tmp_path, 10)
    shards = hf_checkpoint(tmp_path, 20) / "pytorch_model_fsdp_0"
    shards.mkdir()
    (shards / "__0_0.distcp").write_bytes(b"shard")
    assert "pytorch_model_fsdp_0: torch.distributed.checkpoint shards without their .metadata" == hf_reason(tmp_path)
    (shards / ".metadata").write_bytes(b"meta")
    assert Checkpoint(tmp_path / "checkpoint-20", 20) == find_latest(tmp_path)


def deepspeed_model_states(path: Path, dp_world_size: int | None) -> Path:
    """What DeepSpeed's engine._save_checkpoint torch.saves: the module, then counters and world sizes."""
    state: dict[str, object] = {"module": {"layer.weight": torch.zeros(8)}, "buffer_names": [], "optimizer": None,
                                "global_steps": 20, "global_samples": 640}
    if dp_world_size is not None:
        state.update(dp_world_size=dp_world_size, mp_world_size=1)
    return torch_save(path, state)


@needs_torch
def test_deepspeed_shards_need_latest_and_every_rank(tmp_path: Path) -> None:
    """DeepSpeed's global_stepN/ counts only once 'latest' names it and ZeRO states cover ranks 0..N."""
    hf_checkpoint(tmp_path, 10)
    path = hf_checkpoint(tmp_path, 20)
    tag = path / "global_step20"
    tag.mkdir()
    deepspeed_model_states(tag / "mp_rank_00_model_states.pt", None)
    for rank in (0, 2):
        torch_save(tag / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", {"optimizer_state_dict": {}})
    assert "no 'latest' file" in hf_reason(tmp_path)
    (path / "latest").write_text("global_step20")
    assert "ZeRO optim states of data-parallel rank 1" in hf_reason(tmp_path)
    torch_save(tag / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", {"optimizer_state_dict": {}})
    assert Checkpoint(path, 20) == find_latest(tmp_path)


@needs_torch
def test_deepspeed_world_size_reveals_a_rank_not_yet_written(tmp_path: Path) -> None:
    """dp_world_size in the model states (read without unpickling): rank 3 of 4 has written nothing yet."""
    hf_checkpoint(tmp_path, 10)
    path = hf_checkpoint(tmp_path, 20)
    (path / "latest").write_text("global_step20")
    tag = path / "global_step20"
    tag.mkdir()
    deepspeed_model_states(tag / "mp_rank_00_model_states.pt", 4)
    for rank in range(3):
        torch_save(tag / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", {"optimizer_state_dict": {}})
    assert "ZeRO optim states of data-parallel rank 3 (model-parallel rank 00) missing" in hf_reason(tmp_path)


@needs_torch
def test_deepspeed_own_save_directories_are_judged_on_their_shards(tmp_path: Path) -> None:
    """engine.save_checkpoint(dir) leaves global_stepN/ without a marker: whole shards of every rank commit it."""
    for step in (10, 20):
        tag = tmp_path / f"global_step{step}"
        tag.mkdir()
        deepspeed_model_states(tag / "mp_rank_00_model_states.pt", 2)
        for rank in range(2):
            torch_save(tag / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", {"optimizer_state_dict": {}})
    (tmp_path / "latest").write_text("global_step20")
    (tmp_path / "zero_to_fp32.py").write_text("# DeepSpeed's converter\n")
    assert Checkpoint(tmp_path / "global_step20", 20) == find_latest(tmp_path)
    truncate(tmp_path / "global_step20" / "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    selection = scan_checkpoints(tmp_path)
    assert (Checkpoint(tmp_path / "global_step10", 10), ["global_step20"]) == (
        selection.latest, [r.name for r in selection.rejected])
    assert selection.rejected[0].reason.startswith("DeepSpeed zero_pp_rank_1_mp_rank_00_optim_states.pt: torn")


@needs_torch
def test_a_strong_marker_is_trusted_without_reading_the_content(tmp_path: Path) -> None:
    """COMMITTED (written after everything) beside trainer_state.json: complete, as before."""
    hf_checkpoint(tmp_path, 10)
    path = hf_checkpoint(tmp_path, 20)
    (path / "model-00002-of-00002.safetensors").unlink()
    (path / "COMMITTED").write_text("")
    assert Checkpoint(path, 20) == find_latest(tmp_path)


# configuration and status ------------------------------------------------------


def test_the_pattern_comes_from_the_file_and_the_environment_like_every_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpoint-pattern in the TOML file, ELASTIC_CHECKPOINT_PATTERN over it, validated like the flag."""
    from elastic.cli.grammar import apply_settings, build_parsers
    from elastic.core.options.config import ConfigError

    config = tmp_path / "c.toml"
    config.write_text("checkpoint-pattern = 'w-(?P<step>[0-9]+)'\n")
    parser, run = build_parsers()
    apply_settings(run, ["--config", str(config)])
    assert "w-(?P<step>[0-9]+)" == parser.parse_args(["run", "--config", str(config)]).checkpoint_pattern.pattern
    monkeypatch.setenv("ELASTIC_CHECKPOINT_PATTERN", "w-([0-9]+)")
    with pytest.raises(ConfigError, match=r"^ELASTIC_CHECKPOINT_PATTERN: must have a named group for the step"):
        apply_settings(build_parsers()[1], ["--config", str(config)])


def test_a_pattern_without_a_checkpoint_dir_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """--checkpoint-pattern alone names nothing to look in: exit 2, one line, nothing launched."""
    from elastic.cli.entry import main

    assert 2 == main(["run", "--checkpoint-pattern", "w-(?P<step>[0-9]+)", "--", "true"])
    assert "elastic: error: --checkpoint-pattern: needs --checkpoint-dir\n" == capsys.readouterr().err


def test_status_lists_the_checkpoints_passed_over() -> None:
    """elastic status shows each rejected entry with its step and reason, and an unrecognised layout."""
    from elastic.views.status import describe_journal

    events = [
        {"event": "checkpoints_unrecognised", "run_id": "r", "attempt": 0, "checkpoint_dir": "/ck", "count": 7,
         "entries": ["a.log", "b.yaml", "c", "d", "e"]},
        {"event": "checkpoint_rejected", "run_id": "r", "attempt": 1, "checkpoint_dir": "/ck",
         "entry": "ckpt_20.pt", "step": 20, "reason": "torn: no zip end-of-central-directory record at the end"},
    ]
    assert [
        "checkpoints passed over: 2",
        "  attempt 0: nothing in /ck is named like a checkpoint (a.log, b.yaml, c, d, e, and 2 more); "
        "name yours with --checkpoint-pattern (see docs/getting-started/restarts-and-checkpoints.md)",
        "  attempt 1: ckpt_20.pt (step 20) rejected: torn: no zip end-of-central-directory record at the end",
    ] == describe_journal(events)[-3:]


def hdf5_superblock_v0(end_of_file: int) -> bytes:
    """An HDF5 superblock, version 0, as the format specification lays it out (8-byte addresses)."""
    fixed = b"\x89HDF\r\n\x1a\n" + bytes([0, 0, 0, 0, 0, 8, 8, 0]) + struct.pack("<HHI", 4, 16, 0)
    undefined = 0xFFFFFFFFFFFFFFFF
    return fixed + struct.pack("<QQQQ", 0, undefined, end_of_file, undefined)


def test_an_hdf5_file_shorter_than_its_superblock_says_is_torn(tmp_path: Path) -> None:
    """weights_2.h5 ends before the end-of-file address its superblock holds: rejected."""
    whole = hdf5_superblock_v0(4096)
    (tmp_path / "weights_1.h5").write_bytes(whole + bytes(4096 - len(whole)))
    (tmp_path / "weights_2.h5").write_bytes(whole + bytes(1000))
    selection = scan_checkpoints(tmp_path)
    assert Checkpoint(tmp_path / "weights_1.h5", 1) == selection.latest
    assert ["weights_2.h5"] == [r.name for r in selection.rejected]
    assert "ends at byte 4096" in selection.rejected[0].reason


@needs_torch
@pytest.mark.skipif(__import__("os").geteuid() == 0, reason="root reads a chmod 000 file anyway")
def test_an_unreadable_newest_file_is_passed_over(tmp_path: Path) -> None:
    """A checkpoint file we may not read is rejected with the reason; the older one is chosen."""
    torch_save(tmp_path / "ckpt_10.pt", {"w": 1})
    locked = torch_save(tmp_path / "ckpt_20.pt", {"w": 2})
    locked.chmod(0)
    try:
        selection = scan_checkpoints(tmp_path)
    finally:
        locked.chmod(0o600)
    assert (Checkpoint(tmp_path / "ckpt_10.pt", 10), [Rejection("ckpt_20.pt", 20, "cannot be read: permission denied")]) == (
        selection.latest, list(selection.rejected))


def test_choose_passes_over_a_file_the_scan_could_not_read() -> None:
    """The pure rule: a file whose facts say unreadable is rejected with that reason."""
    from elastic.core.checkpoints.selection import Entry, choose
    from elastic.core.checkpoints.formats import FileFacts

    entries = [Entry("ckpt_10.pt", False), Entry("ckpt_20.pt", False, file=FileFacts("ckpt_20.pt", 0, unreadable="EIO"))]
    selection = choose(entries)
    assert (Checkpoint(Path("ckpt_10.pt"), 10), (Rejection("ckpt_20.pt", 20, "cannot be read: EIO"),)) == (
        selection.latest, selection.rejected)
