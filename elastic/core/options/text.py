"""What the options say of themselves: ``--help``'s text and the README's options table. Pure.

Help texts in :data:`elastic.core.options.table.OPTIONS` are written once for both readers:
`` `code` `` and ``[text](#anchor)`` are Markdown in the README, and ``--help`` shows
``'word'``, ``--flag`` or plain text. ``python -m elastic.core.options.text`` prints the
table; ``tests/unit/test_docs.py`` keeps the README's equal to it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from elastic.core.options.table import OPTIONS, Option

__all__ = ["help_text", "markdown_table", "plain"]

_LINK = re.compile(r"\[([^\]]+)\]\(#[^)]+\)")
_CODE = re.compile(r"`([^`]+)`")
_WORD = re.compile(r"[a-z][a-z -]*")


def plain(text: str, *, quote: bool = True) -> str:
    """Help text for a terminal: ``[Hangs](#hangs)`` -> ``Hangs``; `` `auto` `` -> ``'auto'``."""
    text = _LINK.sub(r"'\1' in the README", text)
    return _CODE.sub(lambda m: f"'{m[1]}'" if quote and _WORD.fullmatch(m[1]) else m[1], text)


def help_text(opt: Option) -> str:
    """What ``--help`` says of ``opt``."""
    if opt.value is None:
        return plain(opt.help)
    one_value = _CODE.fullmatch(opt.default_text) is not None  # `auto`: shown bare, as argparse does
    return f"{plain(opt.help)} (default: {plain(opt.default_text, quote=not one_value)})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(options: Sequence[Option] = OPTIONS) -> str:
    """The README's options table."""
    rows = ["| option | meaning | default |", "|---|---|---|"]
    for opt in options:
        shown = opt.flag
        if opt.choices:
            shown += " " + "|".join(opt.choices)
        elif opt.metavar:
            shown += " " + opt.metavar
        rows.append(f"| `{_cell(shown)}` | {_cell(opt.help)} | {_cell(opt.default_text)} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python -m elastic.core.options.text: the README's table, to paste
    print(markdown_table(), end="")

