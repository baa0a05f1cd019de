"""A --config file means the same from wherever `elastic run` starts, and the sample runs."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from harness import REPO, Launcher, script


def test_relative_paths_of_a_config_file_are_its_folders(launcher: Launcher, tmp_path: Path) -> None:
    """`checkpoint-dir`, `cache-dir` and `run-dir` given relative in conf/elastic.toml are under
    conf/, for a launcher started in another directory (they were under that directory)."""
    conf, elsewhere, marker = tmp_path / "conf", tmp_path / "elsewhere", tmp_path / "launched"
    for directory in (conf, elsewhere, marker):
        directory.mkdir()
    command = json.dumps(script("dump_env.py", marker))
    (conf / "elastic.toml").write_text(
        f'[run]\ncheckpoint-dir = "ckpt"\ncache-dir = "caches"\nrun-dir = "runs/one"\ncommand = {command}\n'
    )
    argv = [sys.executable, "-m", "elastic", "run", "--log-format", "json", "--config", "../conf/elastic.toml"]

    finished = launcher.run(raw_argv=argv, command=None, cwd=elsewhere)

    assert 0 == finished.returncode, finished.explain()
    assert (conf / "runs" / "one" / "report.json").is_file()
    env = json.loads((marker / "attempt-0-rank-0.json").read_text())
    assert str(conf / "ckpt") == env["ELASTIC_CHECKPOINT_DIR"]
    assert Path(env["JAX_COMPILATION_CACHE_DIR"]).is_relative_to(conf / "caches")
    assert [] == list(elsewhere.iterdir())


def test_the_sample_config_runs_the_readme_demo(launcher: Launcher, tmp_path: Path) -> None:
    """examples/elastic.toml, as shipped: two ranks of the toy, rank 1 killed at step 5 of the
    first attempt, restarted from the latest checkpoint in examples/toy-checkpoints; exit 0."""
    examples = tmp_path / "examples"
    examples.mkdir()
    for name in ("elastic.toml", "toy_train.py"):
        shutil.copy(REPO / "examples" / name, examples / name)
    argv = [sys.executable, "-m", "elastic", "run", "--log-format", "json", "--run-dir", "run",
            "--config", "examples/elastic.toml"]

    finished = launcher.run(raw_argv=argv, command=None)

    assert 0 == finished.returncode, finished.explain()
    assert [0, 1] == [event["attempt"] for event in finished.events("attempt_started")]
    assert [(1, "killed")] == [
        (event["rank"], event["kind"]) for event in finished.events("worker_failed") if event["kind"] != "collateral"
    ]
    assert (examples / "toy-checkpoints" / "step_20").is_dir()
    [started] = finished.events("run_started")
    assert (2, 3) == (started["nproc_per_node"], started["max_restarts"])
