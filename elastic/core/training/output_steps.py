"""Training steps read from a rank's output, with no code in the training script. Pure.

Frameworks already print their step: a progress bar, a log line. A
:class:`StepReader` finds it in one line of output with a built-in pattern per
framework (or the user's ``--progress-pattern``) and returns what the line
shows as :class:`Reading` values: a number and the *counter* it belongs to. A
bar's counter is its pattern and its total (the Hugging Face Trainer's training
bar, ``120/1000``, and its evaluation bar, ``10/200``, are two counters); any
other pattern's is the pattern. Output is decoded text; a carriage return
separates what a progress bar redraws in place, and colour and cursor escapes
are ignored. Which counter is the training step, and what counts as progress,
is the caller's rule (:mod:`elastic.core.training.stall`).

The plain pattern reads a *step report*, not any sentence naming a step. Its
step field is ``step``, ``global_step`` or ``global step`` (any case) then
``N``, ``=N`` or ``: N``, optionally ``/TOTAL``; the line is a step report when
that field is

- followed by a metric: after a space, comma, semicolon, colon, bar or dash, a
  name of one or two words and a number (``step 120 loss 2.31``,
  ``Step 120/1000, loss=2.31``, ``step 2000: train loss 4.2``); or
- the whole message: at the start of the line or after a bracket, a bar, a
  comma, a semicolon, a colon or a spaced dash (what log headers end with), and
  followed by nothing but punctuation (``step=120``, ``[step 120]``,
  ``INFO - global_step: 120``).

So ``warmup ends at step 5000``, ``saving checkpoint at step 100 to /ckpt`` and
``Step 3: loading data`` show no step.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["BUILT_IN_PATTERNS", "ProgressPattern", "Reading", "StepReader", "compile_user_pattern"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Reading(NamedTuple):
    """A number a line shows and the counter it counts: the pattern's name, and for a
    bar (a pattern with a ``total`` group) ``/`` and its total. ``empty``: a bar drawn
    before it counted anything (``0/80``), which shows its counter but no step done."""

    counter: str
    step: int
    empty: bool = False


@dataclass(frozen=True)
class ProgressPattern:
    """One way a step is printed: a name for the docs and a regex with a ``step`` group
    (or, for the user's pattern, a single group).

    A pattern with a ``total`` group is a bar: each total is a counter of its own. With an
    ``epoch`` group too (a per-epoch bar, as Lightning draws it) it gives ``epoch * total + step``.
    A bar at 0 is *empty*: drawn before its first step (a resumed Hugging Face Trainer draws
    its training bar at ``0/80`` again, then at the resumed step).
    """

    name: str
    example: str
    regex: re.Pattern[str]
    # Strings one of which a matching line must hold: the regex is tried only then
    # (a substring test costs a few percent of a regex search). Empty: always tried.
    needles: tuple[str, ...] = ()

    def read(self, text: str) -> Reading | None:
        """What ``text`` (one redraw, colour stripped) shows of this pattern's counter, if anything."""
        if self.needles and not any(needle in text for needle in self.needles):
            return None
        match = self.regex.search(text)
        if match is None:
            return None
        groups = match.groupdict()
        step = _whole_number(groups["step"] if "step" in groups else match.group(1))
        if step is None:
            return None
        total = groups.get("total")
        if total is None:
            return Reading(self.name, step)
        empty = step == 0
        epoch, whole = _whole_number(groups.get("epoch")), _whole_number(total)
        if epoch is not None and whole is not None:
            step += epoch * whole
        return Reading(f"{self.name}/{total}", step, empty)

    def step(self, text: str) -> int | None:
        """The number :meth:`read` finds, without its counter."""
        reading = self.read(text)
        return None if reading is None else reading.step


def _whole_number(captured: str | None) -> int | None:
    """The step a group captured; None where it captured nothing or no whole number (a
    user's loose pattern: ``it=(\\S+)`` on ``it=3,``): that line shows no step."""
    if captured is None:
        return None
    try:
        return int(captured)
    except ValueError:
        return None


def _pattern(name: str, example: str, regex: str, *needles: str) -> ProgressPattern:
    return ProgressPattern(name, example, re.compile(regex), needles)


# The plain pattern (see the module's docstring). A metric's name: a word, as in
# ``loss``, ``grad_norm``, ``train/loss``; its number: digits, ``.5``, ``nan`` or ``inf``.
_NAME = r"[a-z_][\w./-]*"
_PLAIN_STEP = (
    r"(?i)(?P<lead>^\s*|[\[(|,;:]\s*|[\])]\s*|\s-+\s*)?"  # the start of a message, if it is one
    r"(?<![\w.-])(?:global[_ ])?step(?:\s*[=:]\s*|\s+)(?P<step>\d+)(?:\s*/\s*(?P<total>\d+))?\b(?!\.\d)"
    rf"(?:(?=[\s,;:|-]+{_NAME}(?:\s{_NAME})?\s*[=:]?\s*[-+]?(?:\d|\.\d|nan\b|inf\b))"  # a metric follows
    r"|(?(lead)(?=[\s.,;:|\])]*$)|(?!)))"  # or the field is the whole message
)

# Most specific first: the first pattern that matches a line decides.
BUILT_IN_PATTERNS: tuple[ProgressPattern, ...] = (
    _pattern(
        "MaxText",
        "completed step: 120, seconds: 1.42, TFLOP/s/device: 210.3",
        r"\bcompleted step: (?P<step>\d+)\b",
        "completed step: ",
    ),
    _pattern(
        "Megatron-LM",
        " iteration      120/   10000 | consumed samples: 7680 |",
        r"\biteration\s+(?P<step>\d+)\s*/\s*(?P<total>\d+)\s*\|",
        "iteration",
    ),
    _pattern(
        "PyTorch Lightning progress bar",
        "Epoch 2:  40%|████      | 4/10 [00:01<00:01,  3.20it/s, v_num=0]",
        r"^\s*Epoch (?P<epoch>\d+):\s+\d+%\|[^|]*\|\s*(?P<step>\d+)/(?P<total>\d+) \[",
        "Epoch ",
    ),
    _pattern(
        "tqdm-style bar (Hugging Face Trainer)",
        " 12%|█▏        | 120/1000 [00:31<03:49,  3.84it/s]",
        r"^\s*\d+%\|[^|]*\|\s*(?P<step>\d+)/(?P<total>\d+) \[",
        "%|",
    ),
    _pattern(
        "torchtitan",
        "[titan] 2026-12-03 12:00:00,000 - root - INFO - step: 120  loss:  5.1234  memory: 40.1GiB",
        r"\bstep:\s*(?P<step>\d+)\s+loss:",
        "step:",
    ),
    _pattern("plain step report", "step 120 loss 2.31", _PLAIN_STEP, "step", "Step", "STEP"),
)


def compile_user_pattern(text: str) -> re.Pattern[str]:
    """Compile ``--progress-pattern``: a regex with a group ``step`` or exactly one group.

    Raises ``ValueError`` with a message saying what is allowed.
    """
    try:
        regex = re.compile(text)
    except re.error as error:
        raise ValueError(f"is not a regular expression ({error})") from None
    if "step" not in regex.groupindex and regex.groups != 1:
        raise ValueError(
            f"needs a group named 'step' or exactly one group for the step number, got {regex.groups} groups"
        )
    return regex


class StepReader:
    """Finds the training step in lines of a rank's output."""

    def __init__(self, patterns: Sequence[ProgressPattern] = BUILT_IN_PATTERNS) -> None:
        self._patterns = tuple(patterns)
        # A line holding none of the patterns' needles shows no step: most output, at a
        # substring test's cost. None when a pattern has no needles (the user's).
        self._needles: tuple[str, ...] | None = (
            tuple(n for p in self._patterns for n in p.needles) if all(p.needles for p in self._patterns) else None
        )

    @classmethod
    def with_user_pattern(cls, regex: re.Pattern[str]) -> StepReader:
        """A reader for ``--progress-pattern``: the user's pattern alone decides."""
        return cls((ProgressPattern("--progress-pattern", regex.pattern, regex),))

    def read(self, line: str) -> Sequence[Reading]:
        """What ``line`` shows, in order; of redraws of one counter in a row (a bar redrawn in
        place), the last, and any empty one after it (Lightning's ``Epoch 2: 10/10`` then
        ``Epoch 3: 0/10``: the second shows no step, the first the step 30)."""
        if self._needles is not None and not any(needle in line for needle in self._needles):
            return ()
        found: list[Reading] = []
        for segment in _segments(line):
            for pattern in self._patterns:
                reading = pattern.read(segment)
                if reading is not None:
                    if found and found[-1].counter == reading.counter and not reading.empty:
                        found[-1] = reading
                    else:
                        found.append(reading)
                    break
        return found

    def step(self, line: str) -> int | None:
        """The last number ``line`` shows, of whichever counter, if any."""
        found = self.read(line)
        return found[-1].step if found else None


def _segments(line: str) -> Iterator[str]:
    """What a terminal would show of ``line`` at each carriage return, colour stripped."""
    for segment in line.split("\r"):
        if segment.strip():
            yield _ANSI.sub("", segment) if "\x1b" in segment else segment
