"""Steps read from the output lines frameworks really print; everything else shows no step."""

from __future__ import annotations

import pytest

from elastic.core.progress import BUILT_IN_PATTERNS, StepReader, compile_user_pattern

READER = StepReader()


@pytest.mark.parametrize("pattern", BUILT_IN_PATTERNS, ids=lambda p: p.name)
def test_every_built_in_pattern_reads_its_documented_example(pattern: object) -> None:
    assert pattern.step(pattern.example) is not None  # type: ignore[attr-defined]
    assert READER.step(pattern.example.replace("120", "7")) in (7, 2 * 10 + 4)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("line", "step"),
    [
        ("completed step: 120, seconds: 1.42, TFLOP/s/device: 210.3", 120),
        (" [2026-12-03 12:00:00] iteration      120/   10000 | consumed samples: 7680 | lr: 3e-4 |", 120),
        ("Epoch 2:  40%|████      | 4/10 [00:01<00:01,  3.20it/s, v_num=0, train_loss=0.5]", 24),
        (" 12%|█▏        | 120/1000 [00:31<03:49,  3.84it/s]", 120),
        ("\x1b[31m[titan] 12:00:00 - root - INFO - \x1b[36mstep: 120  \x1b[32mloss:  5.1234", 120),
        ("step 120 loss 2.31", 120),
        ("Step 120/1000, loss=2.31", 120),
        ("step=120 lr=3e-4", 120),
        ("{'global_step': 9, 'loss': 1.0}", None),  # a dict repr names a key, not a step line
        ("global_step=120", 120),
        ("[rank0] train | step: 120 | loss 2.3", 120),
    ],
)
def test_a_frameworks_step_line_gives_its_step(line: str, step: int | None) -> None:
    assert step == READER.step(line)


@pytest.mark.parametrize(
    "line",
    [
        "NCCL WARN Call to connect returned Connection refused, retrying",
        "warmup_steps=100 max_steps=1000",
        "steps_per_epoch: 50",
        "timestep 5 of the diffusion schedule",
        "Loading checkpoint shards: 100%|██████████| 4/4",  # no '[' timing: not a training bar
        "",
        "\r\r",
    ],
)
def test_lines_without_a_training_step_give_none(line: str) -> None:
    assert READER.step(line) is None


def test_a_bar_redrawn_in_place_gives_the_last_step_drawn() -> None:
    line = " 10%|█         | 10/100 [00:01<00:09]\r 11%|█         | 11/100 [00:01<00:09]\r 12%|█▏        | 12/100 [00:01<00:09]"
    assert 12 == READER.step(line)


def test_the_first_matching_pattern_decides() -> None:
    """MaxText's line also contains 'step: 5'; its own pattern reads it."""
    assert 5 == READER.step("completed step: 5, step: 99")


def test_a_user_pattern_with_a_named_group() -> None:
    reader = StepReader.with_user_pattern(compile_user_pattern(r"it=(?P<step>\d+)"))
    assert 42 == reader.step("it=42 loss=1")
    assert reader.step("step 7") is None  # the user's pattern alone decides


def test_a_user_pattern_with_one_unnamed_group() -> None:
    reader = StepReader.with_user_pattern(compile_user_pattern(r"\[(\d+)/\d+\]"))
    assert 3 == reader.step("[3/10] loss 1.0")


@pytest.mark.parametrize(
    ("pattern", "line"),
    [(r"it=(\S+)", "it=3, loss 1"), (r"step(?P<step> \d+)?", "step done"), (r"at (\w+)", "at eval")],
)
def test_a_user_pattern_capturing_no_whole_number_shows_no_step(pattern: str, line: str) -> None:
    """A loose pattern that matches a line without a number there: no step, and no error
    (the reader runs on the node's watcher thread, which also watches for hangs)."""
    reader = StepReader.with_user_pattern(compile_user_pattern(pattern))
    assert reader.step(line) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("step (", "is not a regular expression"),
        (r"step \d+", "needs a group named 'step' or exactly one group"),
        (r"(\d+)/(\d+)", "got 2 groups"),
    ],
)
def test_a_user_pattern_that_cannot_give_a_step_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compile_user_pattern(text)
