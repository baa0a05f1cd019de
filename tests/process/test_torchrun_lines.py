"""torchrun's command lines, as the PyTorch, Hugging Face and Lightning docs give them, run
under `python -m elastic run` with `torchrun` replaced and nothing else changed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from harness import BIN, Launcher, is_alive, launcher_env, read_pids, wait_for

# What each rank of a command line saw: its argv and its world, one file per rank.
_PROBE = """\
import json, os, sys
rank = os.environ["RANK"]
print(f"probe: rank {rank} of {os.environ['WORLD_SIZE']}", flush=True)
seen = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_MAX_RESTARTS", "ELASTIC_RUN_ID")
with open(os.path.join(os.environ["PROBE_OUT"], f"rank-{rank}.json"), "w") as out:
    json.dump({"main": sys.argv[0], "argv": sys.argv[1:], **{k: os.environ[k] for k in seen}}, out)
"""

_RENDEZVOUS_NOTE = (
    "--rdzv-backend, --rdzv-endpoint: ignored: elastic's driver is the rendezvous: it places every "
    "rank and hands out MASTER_ADDR and MASTER_PORT; on many nodes, run this command once (through "
    "Ray), not on each node"
)
_NODE_RANK_NOTE = (
    "--node-rank 0: ignored: elastic starts every node's ranks from this one command (through Ray); "
    "run it once, not once per node"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(launcher: Launcher, tmp_path: Path, line: str) -> tuple[int, str, list[str], dict[int, dict[str, str]]]:
    """Run `torchrun LINE` as `elastic run LINE` in tmp_path (probe.py there, also as module
    `probe`); its status, its ranks' echoed output, its notes and what each rank saw."""
    (tmp_path / "probe.py").write_text(_PROBE)
    out = tmp_path / "seen"
    out.mkdir()
    finished = launcher.run(*line.split(), command=None, env=launcher_env(PROBE_OUT=str(out)))
    notes = [line for line in finished.stderr.splitlines() if line.startswith("elastic: note: ")]
    seen = {int(path.stem.split("-")[1]): json.loads(path.read_text()) for path in out.glob("rank-*.json")}
    assert 0 == finished.returncode, finished.explain()
    return finished.returncode, finished.stdout, [n.removeprefix("elastic: note: ") for n in notes], seen


@pytest.mark.parametrize(
    ("line", "notes"),
    [
        # PyTorch, torchrun's page: "Single-node multi-worker".
        ("--standalone --nnodes=1 --nproc-per-node=2 probe.py --arg1 a", []),
        # PyTorch, torchrun's page: "Stacked single-node multi-worker".
        ("--rdzv-backend=c10d --rdzv-endpoint=localhost:0 --nnodes=1 --nproc-per-node=2 probe.py --arg1 a",
         [_RENDEZVOUS_NOTE]),
        # Hugging Face (Trainer, `torchrun --nproc_per_node 2 --standalone train.py`).
        ("--nproc_per_node 2 --standalone probe.py --arg1 a", []),
        # Hugging Face Accelerate and Transformers' debugging page.
        ("--nproc_per_node=2 --nnodes=1 probe.py --arg1 a", []),
        ("--nproc_per_node 2 --nnodes 1 probe.py --arg1 a", []),
        ("--run_path --nproc_per_node 2 probe.py --arg1 a", []),
    ],
    ids=["pytorch-single-node", "pytorch-stacked", "hugging-face-standalone", "accelerate", "hf-debugging",
         "run-path"],
)
def test_a_single_node_line_runs_its_script_on_two_ranks_with_its_arguments(
    launcher: Launcher, tmp_path: Path, line: str, notes: list[str]
) -> None:
    """Two ranks, each running probe.py with this Python and its arguments untouched; flags elastic
    has no use for are named once on stderr, and nothing else is said of them."""
    _, _, said, seen = _run(launcher, tmp_path, line)

    assert notes == said
    assert {0, 1} == set(seen)
    for rank, probe in seen.items():
        assert (str(rank), "2", ["--arg1", "a"]) == (probe["RANK"], probe["WORLD_SIZE"], probe["argv"])
        assert "probe.py" == Path(probe["main"]).name


@pytest.mark.parametrize(
    "line",
    [
        # PyTorch, torchrun's page: "Fault tolerant", on one node.
        "--nnodes=1 --nproc-per-node=2 --max-restarts=3 --rdzv-id=job-7 --rdzv-backend=c10d "
        "--rdzv-endpoint=localhost:29400 probe.py",
        # PyTorch, torchelastic's quickstart, torchrun's underscore spellings.
        "--nnodes=1 --nproc_per_node=2 --max_restarts=3 --rdzv_id=job-7 --rdzv_backend=c10d "
        "--rdzv_endpoint=localhost:29400 probe.py",
    ],
    ids=["pytorch-fault-tolerant", "pytorch-quickstart"],
)
def test_the_fault_tolerant_line_keeps_its_restarts_and_its_job_id(
    launcher: Launcher, tmp_path: Path, line: str
) -> None:
    """`--max-restarts=3` is elastic's budget, `--rdzv-id` the run's id (`TORCHELASTIC_RUN_ID`, as
    under torchrun); the rendezvous flags are named as ignored."""
    _, _, said, seen = _run(launcher, tmp_path, line)

    assert [_RENDEZVOUS_NOTE] == said
    assert {0, 1} == set(seen)
    assert {("job-7", "3")} == {(p["TORCHELASTIC_RUN_ID"], p["TORCHELASTIC_MAX_RESTARTS"]) for p in seen.values()}
    [started] = [e for e in _journal(launcher) if e["event"] == "run_started"]
    assert ("job-7", 3) == (started["run_id"], started["max_restarts"])


_FAULT_TOLERANT = ("--nnodes=1 --nproc-per-node=2 --max-restarts=3 --rdzv-id=job-7 --rdzv-backend=c10d "
                   "--rdzv-endpoint=localhost:29400")


def _as_typed(line: str, *program: str) -> list[str]:
    """`torchrun LINE PROGRAM` as `python -m elastic run ...`, with nothing added: the runs go to
    ./elastic-runs, the folder of runs, as a user's would."""
    return [sys.executable, "-m", "elastic", "run", "--log-format", "json", *line.split(), *program]


def test_the_same_rdzv_id_runs_again_as_under_torchrun_and_the_ranks_see_it_as_typed(
    launcher: Launcher, tmp_path: Path
) -> None:
    """The PyTorch fault-tolerant line run twice in a row in one folder: both run; the second, its
    run job-7 having succeeded, is run job-7.2, said in a note naming --rdzv-id; every rank of both
    sees TORCHELASTIC_RUN_ID=job-7, as under torchrun; --run-id, a flag never typed, is never named."""
    (tmp_path / "probe.py").write_text(_PROBE)
    seen = []
    for time in ("first", "second"):
        out = tmp_path / time
        out.mkdir()
        finished = launcher.run(raw_argv=_as_typed(_FAULT_TOLERANT, "probe.py"), command=None,
                                env=launcher_env(PROBE_OUT=str(out)))
        assert 0 == finished.returncode, finished.explain()
        assert "--run-id" not in finished.stderr
        seen.append((finished, [json.loads((out / f"rank-{rank}.json").read_text()) for rank in (0, 1)]))

    (first, first_ranks), (second, second_ranks) = seen
    assert {("job-7", "job-7")} == {(p["TORCHELASTIC_RUN_ID"], p["ELASTIC_RUN_ID"]) for p in first_ranks}
    assert {("job-7", "job-7.2")} == {(p["TORCHELASTIC_RUN_ID"], p["ELASTIC_RUN_ID"]) for p in second_ranks}
    assert [] == [line for line in first.stderr.splitlines() if "already finished" in line]
    assert [
        "elastic: note: --rdzv-id job-7: run job-7 already finished (succeeded); starting run job-7.2 "
        "(the ranks' TORCHELASTIC_RUN_ID is still job-7)"
    ] == [line for line in second.stderr.splitlines() if "already finished" in line]
    assert ["job-7", "job-7.2"] == sorted(p.name for p in (tmp_path / "elastic-runs").iterdir())


def test_an_rdzv_id_whose_driver_died_is_continued_and_only_a_finished_one_is_followed_by_a_new_run(
    launcher: Launcher, tmp_path: Path, pid_dir: Path
) -> None:
    """The driver of run job-7 SIGKILLed mid-attempt: the same line continues job-7 (as --run-id
    would), and only once job-7 has finished does the line start job-7.2."""
    program = [str(BIN / "sleep_on_attempt.py"), str(pid_dir), "0"]
    first = launcher.start_argv(_as_typed(_FAULT_TOLERANT, *program), env=launcher_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ranks = read_pids(pid_dir, 2)
    os.kill(first.pid, signal.SIGKILL)  # by pid: the launcher this test started
    first.wait(10)
    wait_for(lambda: not any(is_alive(rank) for rank in ranks), f"ranks {ranks} gone with their driver", 10)

    continued = launcher.run(raw_argv=_as_typed(_FAULT_TOLERANT, *program), command=None)
    after = launcher.run(raw_argv=_as_typed(_FAULT_TOLERANT, *program[:-1], "9"), command=None)  # exits 0 at once

    runs = tmp_path / "elastic-runs"
    assert 0 == continued.returncode, continued.explain()
    assert "already finished" not in continued.stderr
    journal = [json.loads(line) for line in (runs / "job-7" / "journal.jsonl").read_text().splitlines()]
    assert [1] == [e["attempt"] for e in journal if e["event"] == "run_resumed"]
    assert [("succeeded", 0)] == [(e["outcome"], e["exit_status"]) for e in journal if e["event"] == "run_finished"]
    assert 0 == after.returncode, after.explain()
    assert "starting run job-7.2" in after.stderr
    assert ["job-7", "job-7.2"] == sorted(p.name for p in runs.iterdir())


def test_the_lightning_line_gives_the_ranks_its_master_address_and_port(launcher: Launcher, tmp_path: Path) -> None:
    """Lightning's torchrun line for node 0 (`--node_rank 0 --master_addr ... --master_port ...`):
    the ranks get its MASTER_ADDR and MASTER_PORT, and `--node_rank 0` is named as ignored."""
    port = _free_port()
    line = f"--nproc_per_node=2 --nnodes=1 --node_rank 0 --master_addr 127.0.0.1 --master_port {port} probe.py"

    _, _, said, seen = _run(launcher, tmp_path, line)

    assert [_NODE_RANK_NOTE] == said
    assert {("127.0.0.1", str(port))} == {(p["MASTER_ADDR"], p["MASTER_PORT"]) for p in seen.values()}


def test_torchtitans_line_runs_its_module_and_echoes_rank_0_alone(launcher: Launcher, tmp_path: Path) -> None:
    """torchtitan's run_train.sh: `-m MODULE ARGS` runs `python -m MODULE ARGS`, and
    `--local-ranks-filter 0` echoes rank 0 alone (each rank's log still has it all)."""
    line = (
        "--nproc_per_node=2 --rdzv_backend c10d --rdzv_endpoint=localhost:0 --local-ranks-filter 0 "
        "--role rank --tee 3 -m probe --job.config_file llama3_debug.toml"
    )

    _, stdout, said, seen = _run(launcher, tmp_path, line)

    assert [
        _RENDEZVOUS_NOTE,
        "--role: ignored: every rank's ROLE_NAME is 'default'",
        "--tee: ignored: each rank's whole output goes to RUN_DIR/attempt-K/rank-R.log, and to the console "
        "for the ranks --ranks names",
    ] == said
    assert {0, 1} == set(seen)
    for probe in seen.values():
        assert (str(tmp_path / "probe.py"), ["--job.config_file", "llama3_debug.toml"]) == (probe["main"], probe["argv"])
    assert ["[rank 0] probe: rank 0 of 2"] == [line for line in stdout.splitlines() if "probe:" in line]
    assert "probe: rank 1 of 2" in (launcher.run_dir / "attempt-0" / "rank-1.log").read_text()


def test_torchruns_names_of_elastics_options_mean_them(launcher: Launcher, tmp_path: Path) -> None:
    """`--log_dir` is the runs folder (the run in LOG_DIR/<rdzv id>), `--shutdown_timeout` the grace
    period, `--local_ranks_filter` the ranks echoed."""
    (tmp_path / "probe.py").write_text(_PROBE)
    out = tmp_path / "seen"
    out.mkdir()
    argv = [sys.executable, "-m", "elastic", "run", "--log-format", "json", "--log_dir", "logs", "--rdzv_id", "j1",
            "--shutdown_timeout", "7", "--local_ranks_filter", "1", "--nproc_per_node", "2", "probe.py"]

    finished = launcher.run(raw_argv=argv, command=None, env=launcher_env(PROBE_OUT=str(out)))

    assert 0 == finished.returncode, finished.explain()
    run_dir = tmp_path / "logs" / "j1"
    assert "probe: rank 0 of 2" in (run_dir / "attempt-0" / "rank-0.log").read_text()
    assert ["[rank 1] probe: rank 1 of 2"] == [line for line in finished.stdout.splitlines() if "probe:" in line]
    [started] = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()][:1]
    assert ("j1", 7.0) == (started["run_id"], started["grace_period_s"])


def test_no_python_runs_the_program_itself(launcher: Launcher, tmp_path: Path) -> None:
    """`--no-python PROGRAM ARGS` (torchrun's `--no_python`) runs PROGRAM, not `python PROGRAM`."""
    (tmp_path / "probe.py").write_text(_PROBE)
    out = tmp_path / "seen"
    out.mkdir()

    finished = launcher.run(
        "--nproc_per_node=1", "--no_python", sys.executable, "probe.py", "--arg1", command=None,
        env=launcher_env(PROBE_OUT=str(out)),
    )

    assert 0 == finished.returncode, finished.explain()
    assert ["--arg1"] == json.loads((out / "rank-0.json").read_text())["argv"]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("--nnodes=2 --node_rank=1 --master_addr=10.0.0.1 probe.py",
         "--node-rank: 1: elastic starts every node's ranks from one command (through Ray); run it once, "
         "on one machine, without --node-rank (see docs/reference/torchrun.md)"),
        ("--numa-binding=node --nproc-per-node=2 probe.py",
         "--numa-binding: elastic binds no rank to CPUs; drop the flag, or bind in the training script by "
         "LOCAL_RANK (see docs/reference/torchrun.md)"),
        ("--virtual-local-rank probe.py",
         "--virtual-local-rank: each rank keeps its own LOCAL_RANK; --isolate-gpus shows each rank only its GPU "
         "(see docs/reference/torchrun.md)"),
        ("--standalone --nnodes=2 probe.py", "--standalone: runs on this machine alone, but --nnodes asks for up to 2"),
        ("--no_python -m probe", "-m: give -m MODULE or --no-python PROGRAM, not both"),
    ],
    ids=["node-rank-1", "numa-binding", "virtual-local-rank", "standalone-many-nodes", "module-and-no-python"],
)
def test_what_elastic_cannot_honour_is_refused_saying_why_and_nothing_starts(
    launcher: Launcher, tmp_path: Path, line: str, said: str
) -> None:
    """One line naming torchrun's flag and why elastic cannot do it, exit status 2, no rank, no run."""
    (tmp_path / "probe.py").write_text(_PROBE)
    out = tmp_path / "seen"
    out.mkdir()

    finished = launcher.run(*line.split(), command=None, env=launcher_env(PROBE_OUT=str(out)))

    assert 2 == finished.returncode, finished.explain()
    assert [f"elastic: error: {said}"] == finished.stderr.splitlines()
    assert [] == list(out.iterdir())
    assert not launcher.run_dir.exists()


def _journal(launcher: Launcher) -> list[dict[str, object]]:
    lines = (launcher.run_dir / "journal.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]
