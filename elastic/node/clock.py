"""Time as a dependency: the driver and node agents get a clock, tests get a fake one.

The lowest effectful layer (node) holds it, so node agents and the driver share one.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float: ...


class SystemClock:
    """The real clocks: monotonic for deadlines, wall time for records."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()
