"""The functional core imports no Ray and none of the effectful modules."""

from __future__ import annotations

import subprocess
import sys

PURE = ["elastic.core.failures", "elastic.core.controller.machine", "elastic.core.policy.restarts", "elastic.core.launch.plan",
        "elastic.core.controller.controller", "elastic.core.run_layout", "elastic.core.events", "elastic.views.report",
        "elastic.views.status", "elastic.core.redact", "elastic.core.options.config", "elastic.core.policy.rules", "elastic.worker", "elastic.core.journal.recovery", "elastic.core.journal.fold", "elastic.core.journal.folded", "elastic.core.messages", "elastic.core.journal.timeline", "elastic.views.timeline_html", "elastic.views.timeline_svg", "elastic.backends.ray.placement", "elastic.worker.heartbeat"]
EFFECTFUL = ["ray", "elastic.node.supervisor", "elastic.run.driver", "elastic.node.agent",
             "elastic.backends.local", "elastic.cli.entry", "elastic.run.journal", "structlog",
             "subprocess", "elastic.node.watchers.hangs", "elastic.node.stacks"]


def test_pure_modules_load_nothing_effectful() -> None:
    """Importing the core in a fresh interpreter loads no Ray, process or logging code."""
    code = (
        "import sys\n"
        f"for name in {PURE!r}: __import__(name)\n"
        f"print(sorted(m for m in {EFFECTFUL!r} if m in sys.modules))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "[]" == loaded.stdout.strip()
