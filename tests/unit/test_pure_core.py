"""The functional core imports no Ray and none of the effectful modules."""

from __future__ import annotations

import subprocess
import sys

PURE = ["elastic.core.failures", "elastic.core.machine", "elastic.core.policy", "elastic.core.plan",
        "elastic.core.controller", "elastic.core.run_layout", "elastic.core.events", "elastic.run.report_json",
        "elastic.run.status", "elastic.core.redact", "elastic.core.config", "elastic.core.rules", "elastic.worker", "elastic.core.recovery", "elastic.core.fold", "elastic.core.folded", "elastic.core.messages", "elastic.core.timeline", "elastic.run.timeline_drawing", "elastic.run.timeline_svg", "elastic.backends.ray_placement", "elastic.worker.heartbeat"]
EFFECTFUL = ["ray", "elastic.node.supervisor", "elastic.run.driver", "elastic.node.agent",
             "elastic.backends.local", "elastic.cli.entry", "elastic.run.journal", "structlog",
             "subprocess", "elastic.node.hang_watcher", "elastic.node.stacks"]


def test_pure_modules_load_nothing_effectful() -> None:
    """Importing the core in a fresh interpreter loads no Ray, process or logging code."""
    code = (
        "import sys\n"
        f"for name in {PURE!r}: __import__(name)\n"
        f"print(sorted(m for m in {EFFECTFUL!r} if m in sys.modules))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "[]" == loaded.stdout.strip()
