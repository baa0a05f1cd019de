"""The Hugging Face Trainer's steps where it prints none: its ``trainer_state.json`` and log lines. Pure.

With tqdm off (``disable_tqdm=True``) the Trainer draws no bar. What it prints
every ``logging_steps`` steps, on each node's local rank 0, is its logs dict
(``{'loss': '3.903', 'grad_norm': '0.88', 'learning_rate': '5e-05', 'epoch':
'0.25'}``; transformers 4 prints the floats unformatted): a fraction of an
epoch, not a step, and how many steps an epoch holds is the Trainer's to know.
It writes them down in every checkpoint it saves: ``checkpoint-N/trainer_state.json``
holds ``global_step`` (the step), ``epoch`` (the epoch at that step),
``max_steps`` and ``logging_steps``, and ``log_history`` (the same dicts, with
their ``step``: only on disk at a save). So:

- each ``trainer_state.json`` written while an attempt runs is a step, exact,
  once per save (:func:`parse_trainer_state`);
- once one is known (this attempt's, or one an earlier attempt left in the
  output directory, which the Trainer resumes from), a log line's epoch gives
  its step: epoch × steps per epoch (``global_step / epoch`` of that state),
  taken only where the digits printed pin it to one step
  (:meth:`TrainerState.step_at`): the 4 significant digits transformers 5 prints
  (``'0.3333'``, ``'12.35'``, ``'1.5'`` for 1.500) give a range, and a range
  holding several steps gives one only when exactly one of them is a multiple
  of ``logging_steps`` (the steps the Trainer logs at); else the line shows no
  step, and it never shows one past ``max_steps``;
- before any state is known, a log line is a sign of life (its epoch advances),
  not a step (:func:`logged_epoch`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

__all__ = ["TRAINER_STATE_FILE", "LoggedEpoch", "TrainerState", "checkpoint_number", "logged_epoch",
           "parse_trainer_state"]

TRAINER_STATE_FILE = "trainer_state.json"

# A logs dict as the Trainer prints it: ``{... 'epoch': '0.25'}`` (transformers 5) or
# ``{... 'epoch': 0.25}`` (4); a tqdm bar may precede it in the line.
_LOGGED_EPOCH = re.compile(
    r"\{(?:[^{}]*?, )?'epoch': (?P<quote>'?)(?P<epoch>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)(?P=quote)[,}]"
)
# transformers 5 prints each float of the dict as ``f"{value:.4g}"``: 4 significant digits,
# trailing zeros dropped (``'1.5'`` is 1.500).
_PRINTED_DIGITS = 4
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
# The ratio of two floats the Trainer computed: room for their rounding.
_RELATIVE_SLACK = 1e-9


class LoggedEpoch(NamedTuple):
    """The epoch a log line shows and how far the true one can be from it (half its last digit)."""

    value: float
    error: float


def logged_epoch(line: str) -> LoggedEpoch | None:
    """The epoch of the Trainer's logs dict in ``line``, if it holds one."""
    if "'epoch': " not in line:
        return None
    match = _LOGGED_EPOCH.search(line)
    if match is None:
        return None
    try:
        number = Decimal(match.group("epoch"))
    except InvalidOperation:
        return None
    shown = number.as_tuple().exponent  # the last digit shown: 10**shown
    if not isinstance(shown, int) or not number.is_finite():
        return None
    value = float(number)
    if not match.group("quote"):  # a float's repr (transformers 4): exact
        return LoggedEpoch(value, 0.0)
    last: int = shown
    if value > 0:  # 4 significant digits, unless more are shown
        last = min(shown, math.floor(math.log10(value)) - _PRINTED_DIGITS + 1)
    return LoggedEpoch(value, 0.5 * 10.0**last)


def checkpoint_number(name: str) -> int | None:
    """N of a Trainer's ``checkpoint-N`` folder name, else None."""
    match = _CHECKPOINT.fullmatch(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class TrainerState:
    """What a ``trainer_state.json`` says of the Trainer's steps."""

    global_step: int
    epoch: float | None = None
    max_steps: int | None = None
    logging_steps: int | None = None

    @property
    def steps_per_epoch(self) -> float | None:
        """``global_step / epoch``; None before a step or without an epoch."""
        if self.epoch is None or self.epoch <= 0 or self.global_step <= 0:
            return None
        return self.global_step / self.epoch

    def step_at(self, epoch: LoggedEpoch) -> int | None:
        """The step a log line showing ``epoch`` was printed at, where its digits pin it down."""
        per_epoch = self.steps_per_epoch
        if per_epoch is None:
            return None
        middle = epoch.value * per_epoch
        spread = epoch.error * per_epoch + _RELATIVE_SLACK * max(1.0, middle)
        low, high = math.ceil(middle - spread), math.floor(middle + spread)
        if high < low or high < 0:
            return None
        step: int | None = low if low == high else None
        every = self.logging_steps
        if step is None and every is not None and every > 0:
            multiples = range(-(-max(low, 0) // every) * every, high + 1, every)
            step = multiples[0] if len(multiples) == 1 else None
        if step is None or (self.max_steps is not None and self.max_steps > 0 and step > self.max_steps):
            return None
        return step


def parse_trainer_state(text: str) -> TrainerState | None:
    """The steps in a ``trainer_state.json``'s text; None where it is not one (cut short by a save
    still writing, or another file)."""
    try:
        data: Any = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    step = _whole(data.get("global_step"))
    if step is None or step < 0:
        return None
    epoch = data.get("epoch")
    max_steps, logging_steps = _whole(data.get("max_steps")), _whole(data.get("logging_steps"))
    return TrainerState(
        step,
        float(epoch) if isinstance(epoch, (int, float)) and not isinstance(epoch, bool) else None,
        max_steps if max_steps is not None and max_steps > 0 else None,
        logging_steps if logging_steps is not None and logging_steps > 0 else None,
    )


def _whole(value: object) -> int | None:
    """A whole number, also written as a float (``TrainingArguments`` types ``logging_steps`` float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value)
