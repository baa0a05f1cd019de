"""The Hugging Face Trainer's record of its steps, pure: trainer_state.json, its log lines' epochs, and
the step a logged epoch pins down; and, on real files, which state files of its output directory are
new steps."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from elastic.core.training.trainer_state import (
    LoggedEpoch,
    TrainerState,
    checkpoint_number,
    logged_epoch,
    parse_trainer_state,
)
from elastic.node.watchers.steps import TrainerStateFiles
from elastic.testing import FakeClock


def _state_text(step: int, epoch: float, **more: object) -> str:
    fields = {"global_step": step, "epoch": epoch, "max_steps": 200, "logging_steps": 10,
              "log_history": [{"epoch": epoch, "loss": 2.5, "step": step}], **more}
    return json.dumps(fields, indent=2, sort_keys=True) + "\n"


def test_a_trainer_state_gives_its_step_and_what_converts_an_epoch() -> None:
    assert TrainerState(100, 0.5, 200, 10) == parse_trainer_state(_state_text(100, 0.5))
    assert 200.0 == TrainerState(100, 0.5, 200, 10).steps_per_epoch


def test_steps_typed_as_floats_by_training_arguments_are_read_as_whole_numbers() -> None:
    """``logging_steps`` is a float in TrainingArguments: a command line gives 500.0."""
    state = parse_trainer_state(_state_text(100, 0.5, logging_steps=500.0, max_steps=1000))
    assert state is not None and (500, 1000) == (state.logging_steps, state.max_steps)


@pytest.mark.parametrize("text", [
    '{"global_step": 10, "epo',  # a save still writing it
    "[]", "", '{"global_step": true}', '{"global_step": -1}', '{"epoch": 0.5}', '{"global_step": 1.5}',
])
def test_what_is_not_a_trainer_state_shows_no_step(text: str) -> None:
    assert parse_trainer_state(text) is None


def test_a_state_before_its_first_step_converts_no_epoch() -> None:
    assert TrainerState(0, 0.0).steps_per_epoch is None
    assert TrainerState(0, 0.0).step_at(LoggedEpoch(0.25, 0.0)) is None
    assert TrainerState(5).step_at(LoggedEpoch(0.25, 0.0)) is None  # no epoch in the file


@pytest.mark.parametrize(("line", "expected"), [
    # transformers 5: each float printed with 4 significant digits, trailing zeros dropped
    ("{'loss': '3.903', 'grad_norm': '0.8836', 'learning_rate': '0.0008333', 'epoch': '0.25'}",
     LoggedEpoch(0.25, 0.00005)),
    ("{'loss': '3.855', 'epoch': '2'}", LoggedEpoch(2.0, 0.0005)),
    ("{'loss': '2.1', 'epoch': '12.35'}", LoggedEpoch(12.35, 0.005)),
    ("{'loss': '2.1', 'epoch': '1.235e+03'}", LoggedEpoch(1235.0, 0.5)),
    # transformers 4: a float's repr, exact
    ("{'loss': 3.9, 'learning_rate': 5e-05, 'epoch': 0.3333333333333333}", LoggedEpoch(0.3333333333333333, 0.0)),
    ("{'epoch': 1.5, 'eval_loss': 2.0}", LoggedEpoch(1.5, 0.0)),
    # written beside a bar by tqdm
    (" 40%|████      | 4/10 [00:01<00:01]{'loss': 1.0, 'epoch': 0.4}", LoggedEpoch(0.4, 0.0)),
    ("epoch 0.5: loss 2.1", None),
    ("{'epoch': 'abc'}", None),
    ("{'epoch': '0.5}", None),
    ("{'loss': 2.0}", None),
])
def test_the_epoch_of_a_trainer_log_line(line: str, expected: LoggedEpoch | None) -> None:
    found = logged_epoch(line)
    if expected is None:
        assert found is None
    else:
        assert found is not None and expected.value == found.value
        assert expected.error == pytest.approx(found.error)


@pytest.mark.parametrize(("state", "printed", "step"), [
    (TrainerState(6, 0.75, 16, 2), "0.25", 2),  # 8 steps an epoch
    (TrainerState(8, 1.0, 16, 2), "1.25", 10),  # resumed: an earlier attempt's state
    (TrainerState(100, 0.5, 4000, 10), "1.5", 300),  # '1.5' is 1.500: 300 ± 0.1
    (TrainerState(1000, 0.5, 4000, 10), "1.235", 2470),  # 2470 ± 1: one multiple of 10
    (TrainerState(1000, 0.5, 4000, 1), "1.235", None),  # 2469, 2470 or 2471: no step
    (TrainerState(1000, 0.5, 4000, 10), "3", None),  # 6000: past max_steps
    (TrainerState(3, 1 / 3, 90, 1), 0.6666666666666666, 6),  # transformers 4: exact
])
def test_a_logged_epoch_is_a_step_only_where_its_digits_pin_one(
    state: TrainerState, printed: str | float, step: int | None
) -> None:
    shown = f"'{printed}'" if isinstance(printed, str) else repr(printed)
    epoch = logged_epoch(f"{{'loss': '2.0', 'epoch': {shown}}}")
    assert epoch is not None
    assert step == state.step_at(epoch)


def test_checkpoint_folders_are_named_by_their_step() -> None:
    assert 120 == checkpoint_number("checkpoint-120")
    assert checkpoint_number("checkpoint-120.tmp") is None and checkpoint_number("runs") is None


def _write(path: Path, text: str, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_state_files_there_before_the_ranks_start_are_known_but_no_step(tmp_path: Path) -> None:
    """An earlier attempt's checkpoint-100 converts epochs; only a state written since is a step,
    dated by its modification time (kept between the look before and this one)."""
    clock = FakeClock()
    _write(tmp_path / "checkpoint-100" / "trainer_state.json", _state_text(100, 0.5), clock.time() - 60)
    files = TrainerStateFiles(str(tmp_path), clock)
    assert files.state is not None and 100 == files.state.global_step
    clock.advance(10.0)
    assert [] == files.look(clock.monotonic())

    clock.advance(3.0)
    _write(tmp_path / "checkpoint-150" / "trainer_state.json", _state_text(150, 0.75), clock.time() - 1)
    assert [(clock.monotonic() - 1.0, 150)] == files.look(clock.monotonic())
    assert [] == files.look(clock.monotonic() + 1.0)  # unchanged: no new step
    # The final state trainer.save_state() writes at the top, with a clock far behind: dated at the look before.
    _write(tmp_path / "trainer_state.json", _state_text(200, 1.0), clock.time() - 3600)
    looked_at = clock.monotonic() + 1.0
    clock.advance(5.0)
    assert [(looked_at, 200)] == files.look(clock.monotonic())


def test_a_state_file_cut_short_is_read_again_once_whole(tmp_path: Path) -> None:
    clock = FakeClock()
    files = TrainerStateFiles(str(tmp_path), clock)
    path = tmp_path / "checkpoint-50" / "trainer_state.json"
    _write(path, _state_text(50, 0.25)[:30], clock.time())
    clock.advance(1.0)
    assert [] == files.look(clock.monotonic())
    _write(path, _state_text(50, 0.25), clock.time())
    clock.advance(1.0)
    assert [50] == [step for _, step in files.look(clock.monotonic())]


def test_the_state_files_are_looked_at_no_more_than_twice_a_second_unless_forced(tmp_path: Path) -> None:
    clock = FakeClock()
    files = TrainerStateFiles(str(tmp_path), clock)
    _write(tmp_path / "checkpoint-50" / "trainer_state.json", _state_text(50, 0.25), clock.time())
    assert [] == files.look(clock.monotonic() + 0.1)
    assert [50] == [step for _, step in files.look(clock.monotonic() + 0.1, force=True)]


def test_a_missing_output_directory_shows_no_step(tmp_path: Path) -> None:
    files = TrainerStateFiles(str(tmp_path / "absent"), FakeClock())
    assert files.state is None and [] == files.look(5000.0, force=True)
