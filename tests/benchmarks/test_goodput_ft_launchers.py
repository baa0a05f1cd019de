"""NVIDIA's ft_launcher and torchft as launchers: their command lines, and what is asked of the program."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_goodput import parse_args
from goodput.runner import LAUNCHERS, PROGRAM, PROGRAMS, with_program
from goodput.train_ddp import nvrx_heartbeat


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


def test_torchft_runs_a_lighthouse_and_a_torchrun_of_one_rank_per_replica_group(tmp_path: Path) -> None:
    from goodput.torchft_job import PROGRAM as TORCHFT_PROGRAM
    from goodput.torchft_job import group_argv

    spec = LAUNCHERS["torchft"]
    assert spec.argv(tmp_path, 2)[1:] == [str(Path(PROGRAM).parent / "torchft_job.py"), str(tmp_path / "torchft-logs" / "2")]
    argv = group_argv(tmp_path, 1)
    assert argv[argv.index("--nproc-per-node") + 1] == "1" and argv[argv.index("--max-restarts") + 1] == "100000"
    assert str(tmp_path / "replica-1") in argv and argv[-1] == str(TORCHFT_PROGRAM)
    with pytest.raises(ValueError, match="--program jax"):
        with_program(spec, "jax")


def test_torchft_without_torchft_is_a_one_line_error_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("goodput.runner.TORCHFT_PYTHON", "/nonexistent/python")
    with pytest.raises(SystemExit):
        parse_args(["--launchers", "torchft"])
    assert "--launchers torchft: torchft is not installed for /nonexistent/python" in capsys.readouterr().err
