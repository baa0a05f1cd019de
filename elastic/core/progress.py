"""Training steps read from a rank's output, with no code in the training script. Pure.

Frameworks already print their step: a progress bar, a log line. A
:class:`StepReader` finds it in one line of output with a built-in pattern per
framework (or the user's ``--progress-pattern``) and returns the step, or
``None`` when the line shows none. Output is decoded text; a carriage return
separates what a progress bar redraws in place, and colour escapes are
ignored. What counts as progress (a step above the highest seen) is the
caller's rule, so that an evaluation bar counting from 1 again, a repeated
log line or an NCCL warning never looks like training.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["BUILT_IN_PATTERNS", "ProgressPattern", "StepReader", "compile_user_pattern"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class ProgressPattern:
    """One way a step is printed: a name for the docs and a regex with a ``step`` group
    (or, for the user's pattern, a single group).

    A pattern with ``epoch`` and ``total`` groups too (a per-epoch bar, as
    Lightning draws it) gives ``epoch * total + step``.
    """

    name: str
    example: str
    regex: re.Pattern[str]
    # Strings one of which a matching line must hold: the regex is tried only then
    # (a substring test costs a few percent of a regex search). Empty: always tried.
    needles: tuple[str, ...] = ()

    def step(self, text: str) -> int | None:
        if self.needles and not any(needle in text for needle in self.needles):
            return None
        match = self.regex.search(text)
        if match is None:
            return None
        groups = match.groupdict()
        step = _whole_number(groups["step"] if "step" in groups else match.group(1))
        if step is None:
            return None
        if groups.get("epoch") is not None and groups.get("total") is not None:
            return int(groups["epoch"]) * int(groups["total"]) + step
        return step


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
        r"\biteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|",
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
        r"^\s*\d+%\|[^|]*\|\s*(?P<step>\d+)/\d+ \[",
        "%|",
    ),
    _pattern(
        "torchtitan",
        "[titan] 2026-12-03 12:00:00,000 - root - INFO - step: 120  loss:  5.1234  memory: 40.1GiB",
        r"\bstep:\s*(?P<step>\d+)\s+loss:",
        "step:",
    ),
    _pattern(
        "plain step N / step=N / step: N",
        "step 120 loss 2.31",
        r"(?i)(?<![\w.-])(?:global[_ ])?step[ =:]\s*(?P<step>\d+)\b",
        "step", "Step", "STEP",
    ),
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

    def step(self, line: str) -> int | None:
        """The last step shown in ``line`` (a bar redrawn in place shows several), if any."""
        if self._needles is not None and not any(needle in line for needle in self._needles):
            return None
        found = None
        for segment in _segments(line):
            for pattern in self._patterns:
                step = pattern.step(segment)
                if step is not None:
                    found = step
                    break
        return found


def _segments(line: str) -> Iterator[str]:
    """What a terminal would show of ``line`` at each carriage return, colour stripped."""
    for segment in line.split("\r"):
        if segment.strip():
            yield _ANSI.sub("", segment) if "\x1b" in segment else segment
