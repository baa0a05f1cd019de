"""Compatibility: ``import elastic.heartbeat`` is :mod:`elastic.worker.heartbeat`.

Training scripts write ``import elastic.heartbeat`` and
``from elastic.heartbeat import ...``; the beacon lives with the other
worker-side helpers. This module replaces itself in ``sys.modules`` with that
module, so both names are one (callable) module object.
"""

from __future__ import annotations

import sys

from elastic.worker import heartbeat as _heartbeat
from elastic.worker.heartbeat import *  # noqa: F403  (for type checkers; the alias below is what runs)
from elastic.worker.heartbeat import __all__ as __all__

sys.modules[__name__] = _heartbeat
