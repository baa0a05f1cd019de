"""Directories of a run on this host, created private (0700) whatever the umask."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["make_private_dirs"]

_DIR_MODE = 0o700


def make_private_dirs(path: Path) -> None:
    """``mkdir -p`` where every directory created is 0700, whatever the umask.

    ``Path.mkdir(parents=True)`` gives the parents it creates the umask's mode
    (0755): on a node that has not seen the run, that would be the run directory
    itself. Directories that already exist are left as they are.
    """
    missing: list[Path] = []
    for directory in (path, *path.parents):
        if directory.is_dir():
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, _DIR_MODE)
        except FileExistsError:
            continue  # made by another rank's spawn meanwhile
        os.chmod(directory, _DIR_MODE)
