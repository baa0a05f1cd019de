"""More nodes than this machine can ever have: refused at once, before anything starts.

With no Ray cluster to join, elastic would start a Ray of its own, which listens on loopback
only; no other machine can join it, so `--nnodes 2` would wait out `--node-wait-timeout` and
then advise a rerun that can never work. The runs here see no `ray start` record: each has a
Ray temporary folder of its own (`RAY_TMPDIR`), empty or holding a stale record.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import Launcher, launcher_env, script

def no_cluster_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = launcher_env(RAY_TMPDIR=str(tmp_path / "ray-tmp"), **extra)
    env.pop("RAY_ADDRESS", None)
    return env


@pytest.mark.parametrize(
    "options",
    [
        ["--nnodes", "2"],
        ["--nnodes", "2:4", "--backend", "ray"],
        ["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29400"],
    ],
    ids=["nnodes-2", "backend-ray-nnodes-2-to-4", "torchrun-line"],
)
def test_more_than_one_node_with_no_cluster_to_join_is_refused_at_once_saying_what_to_do(
    launcher: Launcher, tmp_path: Path, options: list[str]
) -> None:
    """One line naming --nnodes, what to do (a Ray cluster the other machines join, or
    --nnodes 1), exit status 2, no Ray started, no run directory; never a rerun advised."""
    finished = launcher.run(*options, command=script("exit_with.py", 0), env=no_cluster_env(tmp_path))

    assert 2 == finished.returncode, finished.explain()
    [line] = finished.stderr.splitlines()
    needed = options[1].split(":")[0] if options[0] == "--nnodes" else "2"
    assert line.startswith(f"elastic: error: --nnodes: {needed} nodes needed, but no Ray cluster runs here"), line
    assert "ray start --head" in line and line.endswith("or use --nnodes 1"), line
    assert "rerun" not in line and "requeue" not in line
    assert not launcher.run_dir.exists()  # refused before the wait for nodes, which needs a run


def test_a_stale_ray_start_record_is_no_cluster_to_join(launcher: Launcher, tmp_path: Path) -> None:
    """A `ray start` record whose head is gone (a port nothing listens on) is no cluster: refused too."""
    record = tmp_path / "ray-tmp" / "ray" / "ray_current_cluster"
    record.parent.mkdir(parents=True)
    record.write_text("127.0.0.1:1\n")  # port 1: nothing listens there

    finished = launcher.run("--nnodes", "3", command=script("exit_with.py", 0), env=no_cluster_env(tmp_path))

    assert 2 == finished.returncode, finished.explain()
    assert finished.stderr.startswith("elastic: error: --nnodes: 3 nodes needed, but no Ray cluster runs here")


def test_the_local_backend_with_more_than_one_node_says_what_it_needs(launcher: Launcher, tmp_path: Path) -> None:
    finished = launcher.run("--backend", "local", "--nnodes", "2", command=script("exit_with.py", 0),
                            env=no_cluster_env(tmp_path))

    assert 2 == finished.returncode, finished.explain()
    assert [
        "elastic: error: --nnodes: more than one node needs the ray backend (--backend ray) and a Ray cluster "
        "the other machines join; use --nnodes 1 for this machine alone"
    ] == finished.stderr.splitlines()
