"""A GPU script on torch's CPU wheel: CUDA asked of a build without it stops at once, with a hint."""

from __future__ import annotations

import os

import pytest
from harness import Launcher, script

from elastic.node.probes.gpus import detect_gpus

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


@pytest.mark.skipif(bool(detect_gpus(os.environ)[1]), reason="needs a machine that shows no GPU")
def test_no_gpu_on_a_machine_without_one_stays_deterministic_with_its_hint(launcher: Launcher) -> None:
    """A CUDA build's ``No CUDA GPUs are available`` where the plan gave the ranks no GPU (the machine
    shows none): the script asks CUDA of a machine without it, so one attempt and the gloo hint. A
    rank given a GPU that says so is its node's fault instead (tests/ray/test_ray_node_health.py)."""
    finished = launcher.run("--max-restarts", 3, "--nproc-per-node", 2, command=script("asks_for_cuda.py", "no-gpu"))

    assert 1 == finished.returncode, finished.explain()
    report = finished.report()
    assert 1 == len(report["attempts"]), finished.explain()
    diagnosis = report["root_cause"]["diagnosis"]
    assert ("no-gpu", "deterministic", "RuntimeError: No CUDA GPUs are available") == (
        diagnosis["signature"], diagnosis["class"], diagnosis["line"])
    assert 'init_process_group("gloo")' in diagnosis["hint"]
    assert "no-gpu is deterministic: a restart fails the same way, so it was not retried" in finished.stderr
