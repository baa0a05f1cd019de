"""What docs/reference/run-directory.md says a run directory holds, and a real file's kind in its terms."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "run-directory.md"


def documented_run_files() -> set[str]:
    """The paths the page's listing names (``attempt-K/rank-R.log``, ``cache/jax``...), under the run directory."""
    text = PAGE.read_text()
    start = text.index("```\nelastic-runs/<run-id>/")
    block = text[start + 4 : text.index("```", start + 4)].splitlines()[1:]  # the run directory itself first
    names = set()
    for line in block:
        listed = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        names.update(name.strip() for name in listed.split(","))
    return names


def kind_of(relative: str) -> str:
    """A real path under the run directory in the page's terms: ``attempt-3/rank-1.log`` is
    ``attempt-K/rank-R.log``, ``attempt-3/spare-1-0.log`` is ``attempt-K/spare-N-I.log``."""
    relative = re.sub(r"\bspare-\d+-\d+", "spare-N-I", relative)
    return re.sub(r"\brank-\d+", "rank-R", re.sub(r"\battempt-\d+", "attempt-K", relative))
