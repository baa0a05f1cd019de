"""The command line: the grammar, layering of flags, environment and file,
the subcommands, and :func:`main` (the ``elastic`` script, in
:mod:`elastic.cli.entry`).

``import elastic.cli`` loads nothing else: ``main`` is imported on first use,
so ``from elastic.cli import main`` (what installed ``elastic`` scripts run)
keeps working; before that import (a second or more) SIGUSR1 is held, as
``python -m elastic`` does (:mod:`elastic.run.held_notices`).
"""

from __future__ import annotations

__all__ = ["main"]

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from elastic.cli.entry import main as main


def __getattr__(name: str) -> object:
    if name == "main":
        from elastic.run.held_notices import EARLY_NOTICE_SIGNAL, hold_notices

        hold_notices(EARLY_NOTICE_SIGNAL)  # a notice while the launcher imports itself is kept, not fatal
        from elastic.cli.entry import main

        return main
    raise AttributeError(f"module 'elastic.cli' has no attribute {name!r}")
