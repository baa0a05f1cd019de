"""The folder elastic puts first on every rank's ``PYTHONPATH`` (``--rank-bootstrap``).

It holds :mod:`sitecustomize`, which Python imports at start-up in every rank
whatever its interpreter or virtual environment (elastic need not be installed
there), and :mod:`elastic.worker.bootstrap.jax_cluster` and
:mod:`elastic.worker.bootstrap.jax_cache_note`, which it loads only when the
rank imports JAX. See ``sitecustomize.py`` for why a ``sitecustomize``
and not another hook. Standard library only, Python 3.10 and later.
"""

from __future__ import annotations

import os

__all__ = ["BOOTSTRAP_DIR", "with_bootstrap"]

# This folder: what goes first on a rank's PYTHONPATH. Only sitecustomize.py (and, by its
# path, jax_cluster.py and jax_cache_note.py) are meant to be found there (this file is
# `__init__` to nobody).
BOOTSTRAP_DIR = os.path.dirname(os.path.abspath(__file__))


def with_bootstrap(pythonpath: str | None, bootstrap_dir: str = BOOTSTRAP_DIR) -> str:
    """``PYTHONPATH`` with ``bootstrap_dir`` first and the rest as it was (once, never an empty entry,
    which Python would read as the working directory)."""
    rest = [entry for entry in (pythonpath or "").split(os.pathsep) if entry != bootstrap_dir]
    if pythonpath:
        return os.pathsep.join([bootstrap_dir, *rest])
    return bootstrap_dir
