"""Which commands ``--prewarm`` can serve: ``python SCRIPT.py ARGS`` and nothing else. Pure.

A warm interpreter has imported its modules already; it can run a script in
place of a new ``python SCRIPT.py`` but not a program that is not Python, an
interpreter started with options (``-m``, ``-c``, ``-u``, ``-X``...: they
change how it starts), or a first argument that is not a ``.py`` file. The
driver says so once at the start of a run (every rank then starts cold); each
node's spawner also checks that the script exists where the rank runs
(:func:`elastic.node.prewarm_pool.warm_key`). Standard library only: the
spawner imports it.
"""

from __future__ import annotations

import os

__all__ = ["is_python", "prewarm_unfit"]


def is_python(path: str) -> bool:
    """``python``, ``python3``, ``python3.11``... (any directory): a CPython launched by name."""
    name = os.path.basename(path)
    return name.startswith("python") and all(c in "0123456789." for c in name[len("python") :])


def prewarm_unfit(argv: tuple[str, ...] | list[str]) -> str | None:
    """Why ``--prewarm`` cannot serve this command (every rank starts cold), or None when it can."""
    if not argv or not is_python(argv[0]):
        program = os.path.basename(argv[0]) if argv else "nothing"
        return f"the command runs {program!r}, not python: only 'python SCRIPT.py ARGS' is prewarmed"
    if len(argv) < 2:
        return "python is given no script: only 'python SCRIPT.py ARGS' is prewarmed"
    if argv[1].startswith("-"):
        return (
            f"python is started with the option {argv[1]!r}, which changes how the interpreter starts: "
            "only 'python SCRIPT.py ARGS' is prewarmed"
        )
    if not argv[1].endswith(".py"):
        return f"{argv[1]!r} is not a .py script: only 'python SCRIPT.py ARGS' is prewarmed"
    return None
