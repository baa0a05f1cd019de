"""Steps read from the output lines frameworks really print; everything else shows no step."""

from __future__ import annotations

import pytest

from elastic.core.training.output_steps import BUILT_IN_PATTERNS, Reading, StepReader, compile_user_pattern

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


@pytest.mark.parametrize(
    ("line", "step"),
    [
        # followed by a metric: a name of one or two words and a number
        ("step 120 loss 2.31", 120),
        ("Step 120/1000, loss=2.31", 120),
        ("step=120 lr=3e-4", 120),
        ("Train step 120: loss 2.3", 120),
        ("Epoch 1 step 120 loss 2.3", 120),
        ("step 2000: train loss 4.2, val loss 4.3", 2000),  # nanoGPT's evaluation line
        ("[Rank 0] step=10, skipped=0, lr=[0.0001]", 10),  # DeepSpeed
        ("epoch: 1, step: 5, loss: 2.2", 5),
        ("step 120 | loss=nan", 120),
        ("step 120 - grad_norm: .5", 120),
        # the whole message: at the start or after a header's delimiter, nothing but punctuation after
        ("step 120", 120),
        ("global_step=120", 120),
        ("GLOBAL STEP: 120", 120),
        ("[step 120]", 120),
        ("(step 4).", 4),
        ("Step 120/1000", 120),
        ("INFO:root:step 120", 120),
        ("2026-12-03 12:00:00,000 - INFO - step=120", 120),
        ("[2026-12-03 12:00:00] global_step: 120", 120),
        ("epoch 1 | step 120", 120),
        # prose naming a step, or a step field followed by words: no step report
        ("warmup ends at step 5000", None),
        ("saving checkpoint at step 100 to /ckpt/step_100", None),
        ("Saved checkpoint at step 100.", None),
        ("Resuming from global step 500 (epoch 2)", None),
        ("Reached max step 1000, stopping", None),
        ("Step 3: loading data", None),
        ("2026-12-03 12:00:00 step 5", None),  # after a time, not a header's delimiter
        ("Will evaluate every 500 steps", None),
        ("step 5.5 loss 2", None),
        ("step 120abc", None),
        ("warmup_step=5 loss 2.1", None),
    ],
)
def test_the_plain_pattern_reads_a_step_report_not_a_sentence(line: str, step: int | None) -> None:
    """The rule of the module's docstring, line by line."""
    assert step == READER.step(line)


def test_each_bar_total_is_a_counter_of_its_own() -> None:
    """The Hugging Face Trainer's training bar and its evaluation bar are two counters; a
    plain line is one counter whatever its step, and a total makes another."""
    training = " 12%|█▏        | 120/1000 [00:31<03:49,  3.84it/s]"
    evaluation = "\r 40%|████      | 80/200 [00:02<00:03, 40.0it/s]\x1b[A"  # one line below, cursor back up
    [train] = READER.read(training)
    [evaluated] = READER.read(evaluation)
    assert (120, 80) == (train.step, evaluated.step)
    assert train.counter != evaluated.counter
    assert READER.read("step 5 loss 1")[0].counter == READER.read("step 9 loss 1")[0].counter
    assert READER.read("step 5 loss 1")[0].counter != READER.read("step 5/50 loss 1")[0].counter


def test_a_line_shows_each_counter_it_redraws_in_order_the_last_redraw_of_a_run_of_one() -> None:
    """Redraws of the training bar, then of the evaluation bar, then the training bar again."""
    line = "\r 1%|| 10/1000 [\r 1%|| 11/1000 [\r 5%|| 10/200 [\r 6%|| 12/200 [\r 1%|| 12/1000 ["
    assert [1000, 200, 1000] == [int(r.counter.rsplit("/", 1)[1]) for r in READER.read(line)]
    assert [11, 12, 12] == [r.step for r in READER.read(line)]


def test_a_lightning_bar_is_one_counter_over_its_epochs() -> None:
    first = READER.read("Epoch 0:  90%|█████████ | 9/10 [00:01<00:00,  3.20it/s]")
    second = READER.read("Epoch 1:  10%|█         | 1/10 [00:01<00:00,  3.20it/s]")
    assert [Reading(first[0].counter, 9)] == list(first)
    assert [Reading(first[0].counter, 11)] == list(second)


def test_a_bar_at_zero_is_empty_its_counter_without_a_step_done() -> None:
    """A bar drawn before its first step; a plain line's step 0 is a step (a step counted from 0)."""
    [fresh] = READER.read("  0%|          | 0/80 [00:00<?, ?it/s]")
    [first] = READER.read("  1%|▏         | 1/80 [00:00<00:08,  8.83it/s]")
    [epoch] = READER.read("Epoch 2:   0%|          | 0/10 [00:00<?, ?it/s]")
    assert (fresh.counter, 0, True) == (first.counter, fresh.step, fresh.empty)
    assert (1, False) == (first.step, first.empty)
    assert (20, True) == (epoch.step, epoch.empty)
    assert not READER.read("step 0 loss 2.31")[0].empty


def test_an_empty_redraw_does_not_hide_the_step_drawn_before_it() -> None:
    """Lightning resets its bar at each epoch: the last batch of epoch 2, then epoch 3 at 0."""
    line = "\rEpoch 2: 100%|██████████| 10/10 [00:01<00:00]\rEpoch 3:   0%|          | 0/10 [00:00<?]"
    assert [(30, False), (30, True)] == [(r.step, r.empty) for r in READER.read(line)]
    assert [(21, False)] == [(r.step, r.empty) for r in READER.read("\r  0%|  | 0/80 [\r 26%|▋ | 21/80 [")]


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
