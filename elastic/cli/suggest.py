"""Did you mean: the known name nearest a mistyped flag or ``--config`` key."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["nearest"]


def nearest(word: str, known: Iterable[str]) -> str | None:
    """The name of ``known`` nearest ``word``, if one is near enough to be what was meant.

    ``_`` and ``-`` are the same letter here, as they are in flags and keys
    (``--max_restart`` is near ``--max-restarts``); the name returned is as
    ``known`` spells it. A name that begins with the word is preferred: it is what the
    word abbreviates.
    """
    by_spelling: dict[str, str] = {}
    for name in sorted(set(known)):  # "-" sorts before "_": --max-restarts before --max_restarts
        by_spelling.setdefault(name.replace("_", "-"), name)
    typed = word.replace("_", "-")
    # A name the word begins is what argparse's prefix matching would have taken: the likeliest
    # meaning (--nproc is --nproc-per-node, though --role is nearer letter for letter).
    begun = [name for name in by_spelling if name.startswith(typed)]
    found = difflib.get_close_matches(typed, begun or list(by_spelling), n=1, cutoff=0 if begun else 0.6)
    return by_spelling[found[0]] if found else None
