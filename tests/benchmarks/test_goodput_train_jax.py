"""The JAX program's pure parts, NVIDIA's ft_launcher as a launcher, and ``--program`` in the runner and the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_goodput import parse_args, schedule_and_settings
from goodput.runner import LAUNCHERS, PROGRAM, PROGRAMS, with_program
from goodput.train_ddp import nvrx_heartbeat
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


def test_nvidias_ft_launcher_runs_torchruns_command_line_with_its_heartbeat_timeout(tmp_path: Path) -> None:
    spec = LAUNCHERS["nvrx"]
    argv = spec.argv(tmp_path, 1)
    assert spec.flavour == "torchrun"  # its users checkpoint as torchrun's do
    assert argv[1:3] == ["-m", "nvidia_resiliency_ext.fault_tolerance.launcher"]
    assert argv[argv.index("--ft-rank-heartbeat-timeout") + 1] == "10"
    assert argv[argv.index("--max-restarts") + 1] == "100000"
    assert str(tmp_path / "ft-launcher-logs" / "1") in argv and argv[-1] == str(PROGRAM)
    assert str(PROGRAMS["jax"]) in with_program(spec, "jax").argv(tmp_path, 0)


def test_outside_ft_launcher_a_step_sends_no_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FT_RANK_MONITOR_IPC_SOCKET", raising=False)
    assert nvrx_heartbeat()() is None  # a no-op; nvidia-resiliency-ext need not be installed


def test_nvrx_without_the_extension_is_a_one_line_error_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("goodput.runner.NVRX_PYTHON", "/nonexistent/python")
    with pytest.raises(SystemExit):
        parse_args(["--launchers", "nvrx"])
    assert "--launchers nvrx: nvidia-resiliency-ext is not installed for /nonexistent/python" in capsys.readouterr().err
