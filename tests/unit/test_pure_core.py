"""The functional core imports no Ray and none of the effectful modules."""

from __future__ import annotations

import subprocess
import sys

PURE = ["elastic.failures", "elastic.machine", "elastic.policy", "elastic.plan",
        "elastic.controller", "elastic.layout", "elastic.events", "elastic.report",
        "elastic.status", "elastic.redact", "elastic.config", "elastic.rules", "elastic.worker", "elastic.recovery", "elastic.fold", "elastic.folded", "elastic.messages", "elastic.timeline", "elastic.timeline_render", "elastic.heartbeat"]
EFFECTFUL = ["ray", "elastic.supervisor", "elastic.driver", "elastic.node_agent",
             "elastic.backends.local", "elastic.cli", "elastic.journal", "structlog",
             "subprocess", "elastic.watchdog", "elastic.stacks"]


def test_pure_modules_load_nothing_effectful() -> None:
    """Importing the core in a fresh interpreter loads no Ray, process or logging code."""
    code = (
        "import sys\n"
        f"for name in {PURE!r}: __import__(name)\n"
        f"print(sorted(m for m in {EFFECTFUL!r} if m in sys.modules))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "[]" == loaded.stdout.strip()
