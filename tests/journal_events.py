"""Hand-made journal records for the tests that fold journals: each record as the driver writes it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

T0 = datetime(2026, 12, 3, 9, 0, 0, tzinfo=timezone.utc)


def ev(t: float, name: str, attempt: int = 0, **fields: Any) -> dict[str, Any]:
    """A record named ``name`` of run ``r1``, ``t`` seconds after :data:`T0`."""
    return {"event": name, "time": (T0 + timedelta(seconds=t)).isoformat(), "run_id": "r1",
            "attempt": attempt, **fields}


def phase(t: float, attempt: int, source: str, dest: str, trigger: str = "-") -> dict[str, Any]:
    """A ``phase_changed`` record."""
    return ev(t, "phase_changed", attempt, source=source, dest=dest, trigger=trigger, reason="-")
