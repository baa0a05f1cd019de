"""Only complete checkpoints, end to end: a rank killed mid torch.save, logs and configs, user layouts."""

from __future__ import annotations

import json
from pathlib import Path

from harness import Launcher, launcher_env, script, status_text


def resumed(out: Path, attempt: int) -> dict[str, str | None]:
    record: dict[str, str | None] = json.loads((out / f"attempt-{attempt}.json").read_text())
    return record



def test_a_torn_newest_checkpoint_is_passed_over_and_journaled(launcher: Launcher, tmp_path: Path) -> None:
    """Killed while torch.save wrote ckpt_20.pt: the restart resumes from ckpt_10.pt, and status says why."""
    checkpoints, out = tmp_path / "ckpt", tmp_path / "out"
    checkpoints.mkdir()
    out.mkdir()
    finished = launcher.run("--max-restarts", 1, "--checkpoint-dir", checkpoints,
                            command=script("torn_save.py", checkpoints, out))

    assert 0 == finished.returncode, finished.explain()
    assert {"ELASTIC_RESUME_FROM": str(checkpoints / "ckpt_10.pt"), "ELASTIC_RESUME_STEP": "10"} == resumed(out, 1)
    rejected = finished.events("checkpoint_rejected")
    assert [("ckpt_20.pt", 20)] == [(e["entry"], e["step"]) for e in rejected]
    assert rejected[0]["reason"].startswith("torn: no zip end-of-central-directory record")
    assert 10 == finished.events("attempt_started")[1]["resume_step"]
    assert "ckpt_20.pt (step 20) rejected: torn" in status_text(finished.run_dir)


def test_torn_checkpoints_never_count_as_progress(launcher: Launcher, tmp_path: Path) -> None:
    """Attempts that each leave only a torn newer file make no progress: the crash loop is caught (76)."""
    checkpoints, out = tmp_path / "ckpt", tmp_path / "out"
    checkpoints.mkdir()
    out.mkdir()
    finished = launcher.run("--max-restarts", 10, "--backoff", "0:0", "--checkpoint-dir", checkpoints,
                            "--max-no-progress", 2, command=script("torn_save.py", checkpoints, out, "--always"))

    assert 76 == finished.returncode, finished.explain()
    assert [10, 10] == [e["checkpoint_step"] for e in finished.events("workers_stopped")][1:]
    # each torn file journaled once, though it stays torn for every later look
    assert ["ckpt_20.pt", "ckpt_21.pt", "ckpt_22.pt"] == [e["entry"] for e in finished.events("checkpoint_rejected")]


def test_a_directory_of_logs_and_configs_warns_before_launch(launcher: Launcher, tmp_path: Path) -> None:
    """Nothing named like a checkpoint: a warning names the directory and entries; the run still starts."""
    checkpoints, envs = tmp_path / "ckpt", tmp_path / "envs"
    checkpoints.mkdir()
    envs.mkdir()
    for name in ("train_20241203.log", "config_2.yaml", "weights.pt"):
        (checkpoints / name).write_text("x")
    finished = launcher.run("--checkpoint-dir", checkpoints, command=script("dump_env.py", envs))

    assert 0 == finished.returncode, finished.explain()
    names = [e["event"] for e in finished.journal()]
    assert names.index("checkpoints_unrecognised") < names.index("attempt_started")
    warning = finished.events("checkpoints_unrecognised")[0]
    assert (str(checkpoints), ["config_2.yaml", "train_20241203.log", "weights.pt"]) == (
        warning["checkpoint_dir"], warning["entries"])
    assert "checkpoints_unrecognised" in finished.stderr and str(checkpoints) in finished.stderr
    assert "ELASTIC_RESUME_FROM" not in json.loads((envs / "attempt-0-rank-0.json").read_text())
    assert ("name yours with --checkpoint-pattern (see docs/getting-started/restarts-and-checkpoints.md)"
            in status_text(finished.run_dir))


def test_a_checkpoint_pattern_from_the_environment_names_the_layout(launcher: Launcher, tmp_path: Path) -> None:
    """ELASTIC_CHECKPOINT_PATTERN, like --checkpoint-pattern, makes weights-10k the resume point."""
    checkpoints, envs = tmp_path / "ckpt", tmp_path / "envs"
    checkpoints.mkdir()
    envs.mkdir()
    (checkpoints / "weights-10k").write_bytes(b"w")
    (checkpoints / "step_99.pt").write_bytes(b"w")
    finished = launcher.run("--checkpoint-dir", checkpoints, command=script("dump_env.py", envs),
                            env=launcher_env(ELASTIC_CHECKPOINT_PATTERN=r"weights-(?P<step>\d+)k"))

    assert 0 == finished.returncode, finished.explain()
    env = json.loads((envs / "attempt-0-rank-0.json").read_text())
    assert (str(checkpoints / "weights-10k"), "10") == (env["ELASTIC_RESUME_FROM"], env["ELASTIC_RESUME_STEP"])


def test_a_bad_checkpoint_pattern_is_a_one_line_usage_error(launcher: Launcher, tmp_path: Path) -> None:
    """No step group: exit 2 naming the flag, before anything is launched."""
    finished = launcher.run("--checkpoint-dir", tmp_path, "--checkpoint-pattern", r"weights-(\d+)",
                            command=script("exit_with.py", 0))

    assert 2 == finished.returncode, finished.explain()
    assert 1 == len(finished.stderr.strip().splitlines())
    assert "--checkpoint-pattern" in finished.stderr and "named group for the step" in finished.stderr
    assert not finished.run_dir.exists()
