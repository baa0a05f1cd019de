"""A JAX job stopped by a SIGTERM sent from outside the launcher to one of its processes: JAX's
preemption service stops every process at one sync step, which saves and exits 0. That is a
preemption, not a finished run: the launcher sees it through the rank bootstrap's hook on JAX's
sync point, or, with the bootstrap off, through Orbax's own line, and resumes from the save."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from harness import Launcher, launcher_env, script, skip_unless_installed, wait_for

skip_unless_installed("jax", "orbax.checkpoint")

RUN_TIMEOUT_S = 180.0  # two attempts of 2 processes importing JAX on a loaded 2-core machine
pytestmark = pytest.mark.timeout(RUN_TIMEOUT_S + 30)
STEPS, PAUSE_S, SIGNAL_AT = 40, 0.1, 5


@pytest.mark.parametrize(
    ("how", "options", "seen"),
    [
        ("bare", (), "reached JAX's preemption sync point at step"),
        ("orbax", ("--rank-bootstrap", "off"), "printed Orbax's 'Reached preemption sync point, step="),
    ],
    ids=["bootstrap-hook", "orbax-line"],
)
def test_a_jax_job_stopped_at_its_preemption_sync_point_resumes_from_the_save(
    launcher: Launcher, tmp_path: Path, how: str, options: tuple[str, ...], seen: str
) -> None:
    """SIGTERM to rank 1 from outside at step 5: both processes stop at JAX's sync step, rank 0
    saves it, both exit 0 (before: 'succeeded', 5 of 40 steps). Now: preempted, restarted (the
    preemption budget pays, --max-restarts 0), attempt 1 resumes after the save, to the end."""
    checkpoints, out = tmp_path / "ckpt", tmp_path / "out"
    checkpoints.mkdir()
    out.mkdir()
    process = launcher.start(
        "--nproc-per-node", 2, "--checkpoint-dir", checkpoints, *options,
        command=script("jax_preemption_sync.py", checkpoints, out, STEPS, PAUSE_S, how),
        env=launcher_env(JAX_PLATFORMS="cpu"),
    )
    ready, log = out / "ready-0-1", launcher.run_dir / "attempt-0" / "rank-1.log"
    pid = int(wait_for(lambda: ready.exists() and ready.read_text() or None, f"{ready}", RUN_TIMEOUT_S))
    wait_for(lambda: f"step {SIGNAL_AT}\n" in log.read_text(), f"step {SIGNAL_AT} in {log}", RUN_TIMEOUT_S)
    os.kill(pid, signal.SIGTERM)  # by pid: a rank of the launcher this test started
    finished = launcher.finished(process, timeout_s=RUN_TIMEOUT_S)

    assert 0 == finished.returncode, finished.explain()
    first, second = finished.report()["attempts"]
    cause = first["root_cause"]
    assert ("preempted", "SIGTERM") == (cause["kind"], cause["signal"]), cause
    assert seen in cause["message"], cause
    stopped_at = [line for line in finished.rank_log(0, 0).splitlines() if line.startswith("stopping at step")]
    assert stopped_at, finished.rank_log(0, 0)[-2000:]
    sync_step = int(stopped_at[0].split()[3].rstrip(":"))
    assert sync_step == second["resume_step"], (stopped_at, second)
    assert f"step {sync_step + 1}\n" in finished.rank_log(1, 0)
    assert f"step {STEPS - 1}\n" in finished.rank_log(1, 1)
