"""Inside a Slurm job step, what a rank reads of Slurm's task variables is elastic's world: Lightning's
SLURMEnvironment (which Lightning picks before torchelastic's whenever SLURM_NTASKS is set) sees
process RANK of WORLD_SIZE, not the launcher's one task."""

from __future__ import annotations

from harness import Launcher, launcher_env, script, skip_unless_installed

skip_unless_installed("lightning")

JOB_STEP = {
    "SLURM_JOB_ID": "4244", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
    "SLURM_NTASKS": "1", "SLURM_NNODES": "1", "SLURM_STEP_NODELIST": "localhost", "SLURM_TASKS_PER_NODE": "1",
}


def test_lightning_sees_elastics_world_in_a_slurm_job_step(launcher: Launcher) -> None:
    """Three ranks of a one-task job step: Lightning's Slurm environment says world 3, each its own rank."""
    run = launcher.run("--nproc-per-node", 3, command=script("lightning_slurm_world.py"),
                       env=launcher_env(**JOB_STEP), timeout_s=180)
    assert 0 == run.returncode, run.explain()
    for rank in range(3):
        line = f"slurm detected=True world=3 rank={rank} local={rank} node=0"
        assert line in run.rank_log(0, rank), run.rank_log(0, rank)[-2000:]
