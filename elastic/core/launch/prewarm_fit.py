"""Which commands ``--prewarm`` can serve: ``python SCRIPT.py ARGS`` and ``python -m MODULE ARGS``. Pure.

A warm interpreter has imported its modules already; it can run a script, or a
module as ``-m`` runs it, in place of a new ``python``, but not a program that
is not Python, an interpreter started with other options (``-c``, ``-u``,
``-X``...: they change how it starts), or a first argument that is not a
``.py`` file. The driver says so once at the start of a run (every rank then
starts cold); each node's spawner also checks that the script exists where the
rank runs (:func:`elastic.node.spawner.prewarm_pool.warm_key`). Standard library only:
the spawner imports it.
"""

from __future__ import annotations

import os

__all__ = ["is_python", "learned_prewarm", "prewarm_unfit", "runs_module"]

_SERVED = "only 'python SCRIPT.py ARGS' and 'python -m MODULE ARGS' are prewarmed"


def is_python(path: str) -> bool:
    """``python``, ``python3``, ``python3.11``... (any directory): a CPython launched by name."""
    name = os.path.basename(path)
    return name.startswith("python") and all(c in "0123456789." for c in name[len("python") :])


def runs_module(argv: tuple[str, ...] | list[str]) -> bool:
    """Whether this python command runs a module (``python -m MODULE ARGS``) rather than a script."""
    return len(argv) > 2 and argv[1] == "-m"


def prewarm_unfit(argv: tuple[str, ...] | list[str], modules: tuple[str, ...] | list[str] = ()) -> str | None:
    """Why ``--prewarm`` cannot serve this command with these ``modules`` (every rank starts cold), or None.

    The module ``-m`` runs must not be one of them: the warm interpreter would
    import it, running its code without the rank's variables, before it ran as
    ``__main__``.
    """
    if not argv or not is_python(argv[0]):
        program = os.path.basename(argv[0]) if argv else "nothing"
        return f"the command runs {program!r}, not python: {_SERVED}"
    if len(argv) < 2:
        return f"python is given no script: {_SERVED}"
    if argv[1] == "-m":
        if len(argv) < 3 or not all(part.isidentifier() for part in argv[2].split(".")):
            module = repr(argv[2]) if len(argv) > 2 else "nothing"
            return f"python -m is given {module}, not a module name: {_SERVED}"
        if argv[2] in modules:
            return (
                f"--prewarm names {argv[2]!r}, the module python -m runs: it would run at the prewarm; "
                "prewarm what it imports instead"
            )
        return None
    if argv[1].startswith("-"):
        return (
            f"python is started with the option {argv[1]!r}, which changes how the interpreter starts: {_SERVED}"
        )
    if not argv[1].endswith(".py"):
        return f"{argv[1]!r} is not a .py script: {_SERVED}"
    return None


def learned_prewarm(argv: tuple[str, ...] | list[str], modules: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Which of the modules a rank imported before its first step its warm successor imports
    (``--prewarm-memory``): all of them but the package of the module ``-m`` runs and its modules
    (their code is the program's own); none when the command is not one ``--prewarm`` serves."""
    if prewarm_unfit(argv) is not None:
        return ()
    own = argv[2].partition(".")[0] if runs_module(argv) else None
    return tuple(
        module for module in modules
        if module.partition(".")[0] != own and all(part.isidentifier() for part in module.split("."))
    )
