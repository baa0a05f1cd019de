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


def killed_and_restarted() -> list[dict[str, Any]]:
    """Attempt 0 steps from 3 s; rank 1 is killed at 10.2 s; attempt 1 steps again at 16 s; the run ends at 31 s."""
    return [
        ev(0, "run_started"),
        ev(0.5, "attempt_started", 0, world_size=2, nodes=["n0"], nproc_per_node=[2], resume_step=None),
        phase(1, 0, "pending", "launching"),
        phase(2, 0, "launching", "running"),
        ev(3, "first_step_seen", 0, rank=0, step=1, source="output"),
        ev(10.2, "worker_failed", 0, kind="killed", rank=1, node="n0", exit_code=None, signal="SIGKILL", message=None),
        phase(10.2, 0, "running", "draining"),
        ev(11, "workers_stopped", 0, checkpoint_step=None),
        phase(11, 0, "draining", "pending"),
        ev(12, "attempt_started", 1, world_size=2, nodes=["n0"], nproc_per_node=[2], resume_step=None),
        phase(13, 1, "pending", "launching"),
        phase(14, 1, "launching", "running"),
        ev(16, "first_step_seen", 1, rank=0, step=1, source="output"),
        phase(30, 1, "running", "draining"),
        ev(31, "workers_stopped", 1, checkpoint_step=None),
        phase(31, 1, "draining", "done"),
        ev(31, "run_finished", 1, outcome="succeeded", exit_status=0, reason="-", root_cause=None),
    ]
