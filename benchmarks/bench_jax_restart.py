"""Time from a SIGKILLed JAX rank to the next attempt's first training step, under `elastic run`.

Runs ``examples/jax_orbax.py`` with 2 CPU processes, SIGKILLs rank 1 from
outside once its log shows ``--kill-at-step``, and polls
``attempt-1/rank-0.log`` every 10 ms for its first ``step N`` line. Each
variant is a ``--grace-period`` and the recipe's ``--on-peer-loss``: ``exit``
(the recipe: a survivor exits as soon as its collective fails) or ``raise``
(a plain script: the survivor hangs in Orbax's background save, and JAX's
preemption service swallows elastic's SIGTERM, so it lasts until the SIGKILL
at the end of the grace period).

    JAX_PLATFORMS=cpu python benchmarks/bench_jax_restart.py --grace-periods 30,5 --on-peer-loss exit,raise --repeat 3
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "examples" / "jax_orbax.py"
STEP = re.compile(r"^step (\d+)", re.MULTILINE)


def _latest_step(path: Path) -> int | None:
    try:
        steps = [int(s) for s in STEP.findall(path.read_text(errors="replace"))]
    except FileNotFoundError:
        return None
    return max(steps) if steps else None


def _rank_pid(launcher: int, rank: int) -> int | None:
    """The rank's process under ``launcher``: the outermost one whose environment says RANK=rank."""
    import psutil

    for child in psutil.Process(launcher).children(recursive=True):
        try:
            env = child.environ()
            if env.get("RANK") == str(rank) and "ELASTIC_RUN_ID" in env and psutil.Process(child.ppid()).environ().get("RANK") is None:
                return child.pid
        except psutil.Error:
            continue
    return None


def _wait(predicate, timeout_s: float, interval_s: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"nothing after {timeout_s}s")


def once(workdir: Path, grace: float, on_peer_loss: str, kill_at: int, timeout_s: float) -> float:
    """One repetition: seconds from the SIGKILL to attempt 1's first step line on rank 0."""
    run_dir = workdir / "run"
    argv = [
        sys.executable, "-m", "elastic", "run", "--run-dir", str(run_dir), "--nproc-per-node", "2",
        "--max-restarts", "1", "--grace-period", str(grace), "--checkpoint-dir", str(workdir / "ckpt"), "--",
        sys.executable, str(EXAMPLE), "--output", str(workdir / "final.npz"), "--steps", "100",
        "--step-seconds", "0.1", "--on-peer-loss", on_peer_loss, "{resume_step?--resume-step}",
    ]
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    with (workdir / "launcher.log").open("wb") as out:
        launcher = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        rank1_log = run_dir / "attempt-0" / "rank-1.log"

        def at_kill_step() -> int | None:
            step = _latest_step(rank1_log)
            return _rank_pid(launcher.pid, 1) if step is not None and step >= kill_at else None

        pid = _wait(at_kill_step, timeout_s, 0.02)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        next_log = run_dir / "attempt-1" / "rank-0.log"
        _wait(lambda: _latest_step(next_log) is not None, timeout_s, 0.01)
        return time.monotonic() - killed_at
    finally:
        if launcher.poll() is None:  # two Ctrl-Cs: the launcher kills its ranks at once
            os.kill(launcher.pid, signal.SIGINT)
            time.sleep(0.5)
            if launcher.poll() is None:
                os.kill(launcher.pid, signal.SIGINT)
        launcher.wait(timeout_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grace-periods", default="30,5", help="comma-separated --grace-period values (default: 30,5)")
    parser.add_argument("--on-peer-loss", default="exit,raise", help="recipe variants (default: exit,raise)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per variant (default: 3)")
    parser.add_argument("--kill-at-step", type=int, default=8, help="SIGKILL rank 1 once its log shows this step")
    parser.add_argument("--timeout", type=float, default=180.0, help="bound on every wait, seconds (default: 180)")
    args = parser.parse_args()
    results: dict[tuple[str, float], list[float]] = {}
    for repetition in range(args.repeat):
        for on_peer_loss in args.on_peer_loss.split(","):
            for grace in (float(g) for g in args.grace_periods.split(",")):
                with tempfile.TemporaryDirectory(prefix="bench-jax-") as workdir:
                    seconds = once(Path(workdir), grace, on_peer_loss, args.kill_at_step, args.timeout)
                results.setdefault((on_peer_loss, grace), []).append(seconds)
                print(f"repetition {repetition}: --on-peer-loss {on_peer_loss} --grace-period {grace:g}: "
                      f"{seconds:.2f}s from the kill to the next first step", flush=True)
    print("median seconds from the SIGKILL to attempt 1's first step (rank 0):")
    for (on_peer_loss, grace), samples in results.items():
        print(f"  --on-peer-loss {on_peer_loss:5} --grace-period {grace:4g}: {statistics.median(samples):6.2f}"
              f"  samples {', '.join(f'{s:.2f}' for s in samples)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
