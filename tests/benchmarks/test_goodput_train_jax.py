"""The JAX program's pure parts, and ``--program`` in the runner and the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_goodput import parse_args, schedule_and_settings
from goodput.runner import LAUNCHERS, PROGRAM, PROGRAMS, with_program
from goodput.train_jax import checkpoint_directory, resume_step, torchrun_coordinator


def test_under_torchrun_jaxs_coordinator_is_one_port_above_torchruns_master_port() -> None:
    assert torchrun_coordinator({"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29500"}) == "10.0.0.7:29501"


def test_elastic_hands_the_step_back_and_torchrun_resumes_from_orbaxs_latest() -> None:
    assert resume_step("elastic", 40, {"ELASTIC_RESUME_STEP": "30"}) == 30
    assert resume_step("elastic", 40, {}) is None  # elastic found none committed: start afresh
    assert resume_step("torchrun", 40, {"ELASTIC_RESUME_STEP": "30"}) == 40
    assert resume_step("torchrun", None, {}) is None


def test_orbax_writes_into_elastics_checkpoint_dir_or_one_under_the_benchmarks(tmp_path: Path) -> None:
    env = {"ELASTIC_CHECKPOINT_DIR": str(tmp_path / "e"), "BENCH_CHECKPOINT_DIR": str(tmp_path / "b")}
    assert checkpoint_directory("elastic", env) == tmp_path / "e"
    assert checkpoint_directory("torchrun", env) == tmp_path / "b" / "orbax"


def test_the_jax_program_replaces_the_ddp_one_on_each_launchers_command_line(tmp_path: Path) -> None:
    for name in ("elastic", "elastic-ray", "torchrun"):
        argv = with_program(LAUNCHERS[name], "jax").argv(tmp_path, 0)
        assert str(PROGRAMS["jax"]) in argv and str(PROGRAM) not in argv
        assert with_program(LAUNCHERS[name], "jax").name == name
    assert with_program(LAUNCHERS["torchrun"], "ddp") is LAUNCHERS["torchrun"]


def test_ray_train_runs_no_jax_program_and_says_so() -> None:
    with pytest.raises(ValueError, match="--program jax"):
        with_program(LAUNCHERS["ray-train"], "jax")
    with pytest.raises(SystemExit):
        parse_args(["--program", "jax"])  # the default launchers include ray-train


def test_program_reaches_the_settings_of_a_drawn_schedule_and_of_the_smoke() -> None:
    for argv in (["--events", "3"], ["--smoke"]):
        args = parse_args([*argv, "--program", "jax", "--launchers", "elastic,torchrun"])
        assert schedule_and_settings(args)[1].program == "jax"
    assert schedule_and_settings(parse_args(["--events", "3"]))[1].program == "ddp"

