"""A GPU script on torch's CPU wheel: CUDA asked of a build without it stops at once, with a hint."""

from __future__ import annotations

import pytest
from harness import Launcher, script

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="needs torch without a GPU (the CPU wheel)")


@pytest.mark.parametrize("case, line", [
    ("set-device", "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'"),
    ("nccl", "RuntimeError: Distributed package doesn't have NCCL built in"),
])
def test_cuda_asked_of_a_cpu_build_stops_after_one_attempt_with_a_hint(
    launcher: Launcher, case: str, line: str
) -> None:
    """Two ranks calling set_device(LOCAL_RANK), or init_process_group("nccl"), with 3 restarts to spend:
    one attempt, the rank's exit status, the signature and the hint to use gloo."""
    finished = launcher.run("--max-restarts", 3, "--nproc-per-node", 2, command=script("asks_for_cuda.py", case))

    assert 1 == finished.returncode, finished.explain()
    report = finished.report()
    assert 1 == len(report["attempts"]), finished.explain()
    diagnosis = report["root_cause"]["diagnosis"]
    assert ("cuda-not-built", "deterministic", line) == (diagnosis["signature"], diagnosis["class"], diagnosis["line"])
    assert f"  signature: cuda-not-built (deterministic): {line}" in finished.stderr
    [hint] = [row for row in finished.stderr.splitlines() if row.startswith("  hint: ")]
    assert "CPU build" in hint and 'init_process_group("gloo")' in hint and "torch.cuda.set_device" in hint
    assert diagnosis["hint"] == hint.removeprefix("  hint: ")
    assert "cuda-not-built is deterministic: a restart fails the same way, so it was not retried" in finished.stderr
    assert [] == finished.events("backoff_started") and [] == finished.events("restart_scheduled")
