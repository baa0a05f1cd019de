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

    def step(self, text: str) -> int | None:
        match = self.regex.search(text)
        if match is None:
            return None
        groups = match.groupdict()
        step = int(groups["step"] if "step" in groups else match.group(1))
        if groups.get("epoch") is not None and groups.get("total") is not None:
            return int(groups["epoch"]) * int(groups["total"]) + step
        return step


def _pattern(name: str, example: str, regex: str) -> ProgressPattern:
    return ProgressPattern(name, example, re.compile(regex))


# Most specific first: the first pattern that matches a line decides.
BUILT_IN_PATTERNS: tuple[ProgressPattern, ...] = (
    _pattern(
        "MaxText",
        "completed step: 120, seconds: 1.42, TFLOP/s/device: 210.3",
        r"\bcompleted step: (?P<step>\d+)\b",
    ),
    _pattern(
        "Megatron-LM",
        " iteration      120/   10000 | consumed samples: 7680 |",
        r"\biteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|",
    ),
    _pattern(
        "PyTorch Lightning progress bar",
        "Epoch 2:  40%|████      | 4/10 [00:01<00:01,  3.20it/s, v_num=0]",
        r"^\s*Epoch (?P<epoch>\d+):\s+\d+%\|[^|]*\|\s*(?P<step>\d+)/(?P<total>\d+) \[",
    ),
    _pattern(
        "tqdm-style bar (Hugging Face Trainer)",
        " 12%|█▏        | 120/1000 [00:31<03:49,  3.84it/s]",
        r"^\s*\d+%\|[^|]*\|\s*(?P<step>\d+)/\d+ \[",
    ),
    _pattern(
        "torchtitan",
        "[titan] 2026-12-03 12:00:00,000 - root - INFO - step: 120  loss:  5.1234  memory: 40.1GiB",
        r"\bstep:\s*(?P<step>\d+)\s+loss:",
    ),
    _pattern(
        "plain step N / step=N / step: N",
        "step 120 loss 2.31",
        r"(?i)(?<![\w.-])(?:global[_ ])?step[ =:]\s*(?P<step>\d+)\b",
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

    @classmethod
    def with_user_pattern(cls, regex: re.Pattern[str]) -> StepReader:
        """A reader for ``--progress-pattern``: the user's pattern alone decides."""
        return cls((ProgressPattern("--progress-pattern", regex.pattern, regex),))

    def step(self, line: str) -> int | None:
        """The last step shown in ``line`` (a bar redrawn in place shows several), if any."""
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
            yield _ANSI.sub("", segment)
