"""The functional core imports no Ray and none of the effectful modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "elastic"


def _modules_of(layer: str) -> list[str]:
    """Every module of ``elastic/<layer>/``, its subpackages too, named from the source tree."""
    names = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


# The layers that decide or render (found by walking them, so a new module is covered),
# plus a shell module whose rule is pure: Ray's placement of ranks on nodes.
PURE = [*_modules_of("core"), *_modules_of("views"), *_modules_of("worker"), "elastic.backends.ray.placement"]
EFFECTFUL = ["ray", "elastic.node.supervisor", "elastic.run.driver", "elastic.node.agent",
             "elastic.backends.local", "elastic.cli.entry", "elastic.run.records.journal", "structlog",
             "subprocess", "elastic.node.watchers.hangs", "elastic.node.probes.stacks"]


def test_pure_modules_load_nothing_effectful() -> None:
    """Importing the core in a fresh interpreter loads no Ray, process or logging code."""
    code = (
        "import sys\n"
        f"for name in {PURE!r}: __import__(name)\n"
        f"print(sorted(m for m in {EFFECTFUL!r} if m in sys.modules))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "[]" == loaded.stdout.strip()
