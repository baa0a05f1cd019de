"""--prewarm with real processes: a warm rank sees what a cold one sees, falls back cold where it must,
and exits, is killed and is swept like any rank."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from harness import (
    BIN, Finished, Launcher, is_alive, launcher_env, read_pids, script, status_text, wait_for,
)

from elastic.core.failures import WorkerExit
from elastic.core.launch.spec import LAUNCH_VARIABLES, WorkerSpec
from elastic.node.supervisor import ProcessSupervisor

PREWARM = ["--prewarm", "prewarm_early", "--prewarm-delay", "0"]
# What differs between two attempts of the same run: the attempt's number, port and files.
PER_ATTEMPT = {
    "ELASTIC_ATTEMPT", "TORCHELASTIC_RESTART_COUNT", "MASTER_PORT", "ELASTIC_HEARTBEAT_FILE",
    "TORCHELASTIC_ERROR_FILE", "ELASTIC_COORDINATOR_ADDRESS", "JAX_COORDINATOR_ADDRESS", "JAX_COORDINATOR_PORT",
    "ELASTIC_PREEMPTION_FILE", "ELASTIC_SIGNALS_FILE", "ELASTIC_STARTUP_FILE",
}
# What a script sees that must be the same cold and warm (the environment is compared apart).
SAME = [
    "argv", "orig_argv", "name", "main_is_this_module", "path0", "path", "file", "spec", "package", "cached",
    "loader", "main_dunders", "executable", "flags", "cwd", "fds", "signals", "sigmask", "package_at_import",
]


def records(directory: Path, attempt: int, ranks: int) -> list[dict[str, Any]]:
    return [json.loads((directory / f"attempt-{attempt}-rank-{r}.json").read_text()) for r in range(ranks)]


def warm_and_cold(started: dict[str, Any]) -> dict[str, list[int]]:
    """An attempt's ``ranks_started`` in the report, without the memory the warm ones held."""
    return {"warm": started["warm"], "cold": started["cold"]}


def assert_same_as_cold(cold: dict[str, Any], warm: dict[str, Any]) -> None:
    for key in SAME:
        assert cold[key] == warm[key], key
    assert cold["environ"].keys() == warm["environ"].keys()
    differ = {name for name in cold["environ"] if cold["environ"][name] != warm["environ"][name]}
    assert differ <= PER_ATTEMPT, differ - PER_ATTEMPT
    for record in (cold, warm):  # a module the script imports sees the rank's whole environment
        assert record["late_module_env_at_import"] == record["environ"]


def test_a_prewarmed_rank_sees_what_a_cold_one_sees(launcher: Launcher, tmp_path: Path) -> None:
    """argv, orig_argv, __main__, sys.path, __file__, cwd, fds, signals and the environment of
    every module the script imports are those of attempt 0's cold start; only the prewarmed
    module was imported before the rank variables were there."""
    out = tmp_path / "records"
    out.mkdir()
    linked = tmp_path / "linked-bin"  # sys.path[0] is the script's real directory, cold or warm
    linked.symlink_to(BIN)
    command = [sys.executable, str(linked / "prewarm_probe.py"), out, "--fail-rank", 1, "extra arg"]
    finished = launcher.run("--nproc-per-node", 2, "--max-restarts", 1, *PREWARM, command=command)

    assert 0 == finished.returncode, finished.explain()
    cold, warm = records(out, 0, 2), records(out, 1, 2)
    def imports(attempt: list[dict[str, Any]]) -> list[tuple[str | None, bool]]:
        return [(r["early_module_rank_at_import"], r["early_module_same_pid"]) for r in attempt]

    assert [("0", True), ("1", True)] == imports(cold)
    assert [(None, True), (None, True)] == imports(warm)  # imported before the launch, in the rank's process
    for cold_rank, warm_rank in zip(cold, warm):
        assert_same_as_cold(cold_rank, warm_rank)
    assert str(BIN) == warm[0]["path0"]
    assert "probe: wrote" in finished.rank_log(1, 0)
    # The journal and the report say so: attempt 0 started cold, attempt 1 warm.
    started = [(e["attempt"], e["warm"], e["cold"]) for e in finished.events("ranks_started")]
    assert [(0, [], [0, 1]), (1, [0, 1], [])] == started
    expected = [([], [0, 1]), ([0, 1], [])]
    started_as = [a["ranks_started"] for a in finished.report()["attempts"]]
    assert expected == [(s["warm"], s["cold"]) for s in started_as]
    assert 0 == started_as[0]["warm_resident_mb"] < started_as[1]["warm_resident_mb"]  # what the warm ones held


@pytest.mark.parametrize("module", ["prewarm_probe", "prewarm_pkg"], ids=["module", "package"])
def test_a_prewarmed_python_m_rank_sees_what_a_cold_one_sees(launcher: Launcher, tmp_path: Path, module: str) -> None:
    """``python -m MODULE`` starts warm too, and sees what ``python -m`` gives: the working
    directory first on sys.path, the module's file as argv[0] and ``-m`` while its package
    is imported, the module's spec and loader, runpy's frames under a traceback's."""
    out = tmp_path / "records"
    out.mkdir()
    env = launcher_env(PYTHONPATH=os.pathsep.join([str(BIN), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", module, out, "--fail-rank", 1, "extra arg"]
    finished = launcher.run("--nproc-per-node", 2, "--max-restarts", 1, *PREWARM, command=command, env=env)

    assert 0 == finished.returncode, finished.explain()
    assert not [line for line in finished.stderr.splitlines() if "prewarm_not_applied" in line]
    cold, warm = records(out, 0, 2), records(out, 1, 2)
    assert [("0", True), ("1", True)] == [(r["early_module_rank_at_import"], r["early_module_same_pid"]) for r in cold]
    assert [(None, True), (None, True)] == [(r["early_module_rank_at_import"], r["early_module_same_pid"]) for r in warm]
    for cold_rank, warm_rank in zip(cold, warm):
        assert_same_as_cold(cold_rank, warm_rank)
    main_file = BIN / ("prewarm_pkg/__main__.py" if module == "prewarm_pkg" else "prewarm_probe.py")
    assert (str(tmp_path), str(main_file), "__main__") == (warm[1]["path0"], warm[1]["argv"][0], warm[1]["name"])
    assert [sys.executable, "-m", module, str(out), "--fail-rank", "1", "extra arg"] == warm[1]["orig_argv"]
    if module == "prewarm_pkg":  # imported at the launch, with -m in argv[0], as python -m does
        assert [["-m", str(out), "--fail-rank", "1", "extra arg"], "1"] == warm[1]["package_at_import"]
    assert {"warm": [0, 1], "cold": []} == warm_and_cold(finished.report()["attempts"][1]["ranks_started"])


def test_a_warm_python_m_rank_fails_as_a_cold_one_does(launcher: Launcher, tmp_path: Path) -> None:
    """The traceback of a module run with -m shows runpy's frames and the module's, never the
    warm interpreter's; a module that does not exist ends as python -m ends (exit 1, its message)."""
    out = tmp_path / "records"
    out.mkdir()
    env = launcher_env(PYTHONPATH=os.pathsep.join([str(BIN), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "prewarm_probe", out, "--raise"]
    finished = launcher.run("--nproc-per-node", 2, "--max-restarts", 1, *PREWARM, command=command, env=env)

    assert 1 == finished.returncode, finished.explain()
    assert {"warm": [0, 1], "cold": []} == warm_and_cold(finished.report()["attempts"][1]["ranks_started"])
    def traceback(attempt: int) -> list[str]:
        log = finished.rank_log(attempt, 0)
        lines = log[log.index("Traceback"):].splitlines()
        return [line.split(", line")[0] for line in lines if line.startswith("  File")]

    assert traceback(0) == traceback(1)
    assert ['  File "<frozen runpy>"', '  File "<frozen runpy>"', f'  File "{BIN / "prewarm_probe.py"}"'] == traceback(1)


@pytest.mark.parametrize(
    ("command", "prewarm", "why"),
    [
        ([sys.executable, "-u", str(BIN / "prewarm_probe.py")], "prewarm_early", "the option '-u'"),  # an option
        ([sys.executable, "-c", "import runpy; runpy.run_module('prewarm_probe', run_name='__main__')"],
         "prewarm_early", "the option '-c'"),  # code, not a script
        (["/bin/sh", "-c", 'exec "$0" "$@"', sys.executable, str(BIN / "prewarm_probe.py")], "prewarm_early",
         "runs 'sh', not python"),
        # Its code would run in the warm interpreter, before the rank's variables are there.
        ([sys.executable, "-m", "prewarm_probe"], "prewarm_early,prewarm_probe", "the module python -m runs"),
    ],
    ids=["interpreter-option", "python-c", "not-python", "python-m-prewarming-its-module"],
)
def test_commands_that_are_not_python_script_start_cold(
    launcher: Launcher, tmp_path: Path, command: list[str], prewarm: str, why: str
) -> None:
    """Every rank starts cold, and the launcher says why once, at the start of the run."""
    out = tmp_path / "records"
    out.mkdir()
    env = launcher_env(PYTHONPATH=os.pathsep.join([str(BIN), os.environ.get("PYTHONPATH", "")]))
    finished = launcher.run("--nproc-per-node", 2, "--max-restarts", 1, "--prewarm", prewarm, "--prewarm-delay", 0,
                            command=[*command, out, "--fail-rank", 1], env=env)  # fmt: skip

    assert 0 == finished.returncode, finished.explain()
    assert ["0", "1"] == [r["early_module_rank_at_import"] for r in records(out, 1, 2)]
    assert {"warm": [], "cold": [0, 1]} == warm_and_cold(finished.report()["attempts"][1]["ranks_started"])
    warnings = [line for line in finished.stderr.splitlines() if "prewarm_not_applied" in line]
    assert 1 == len(warnings), finished.explain()
    assert why in warnings[0]


def test_a_module_that_fails_to_prewarm_means_a_cold_start(launcher: Launcher, tmp_path: Path) -> None:
    """A warm interpreter whose import failed runs the rank's own command (exec), never the script."""
    out = tmp_path / "records"
    out.mkdir()
    command = script("prewarm_probe.py", out, "--fail-rank", 1)
    finished = launcher.run(
        "--nproc-per-node", 2, "--max-restarts", 1, "--prewarm", "no_such_module_for_elastic,prewarm_early",
        "--prewarm-delay", 0, command=command,
    )

    assert 0 == finished.returncode, finished.explain()
    cold, warm = records(out, 0, 2), records(out, 1, 2)
    assert ["0", "1"] == [r["early_module_rank_at_import"] for r in warm]
    for cold_rank, warm_rank in zip(cold, warm):
        assert_same_as_cold(cold_rank, warm_rank)


def test_a_warm_rank_sigkilled_is_a_killed_rank_and_the_run_goes_on(launcher: Launcher, tmp_path: Path) -> None:
    """SIGKILL from outside to a warm rank: journaled as killed (SIGKILL), its peer collateral, restarted."""
    out = tmp_path / "records"
    out.mkdir()
    command = script("prewarm_probe.py", out, "--fail-rank", 1, "--sleep-on-attempt", 1)
    process = launcher.start("--nproc-per-node", 2, "--max-restarts", 2, *PREWARM, command=command)
    path = out / "attempt-1-rank-1.json"
    victim = json.loads(wait_for(lambda: path.exists() and path.read_text(), "attempt 1's rank 1"))
    assert victim["early_module_rank_at_import"] is None, "attempt 1 should have started warm"
    os.kill(victim["pid"], signal.SIGKILL)
    finished = launcher.finished(process)

    assert 0 == finished.returncode, finished.explain()
    failed = [e for e in finished.events("worker_failed") if e["attempt"] == 1]
    assert {(1, "killed", "SIGKILL"), (0, "collateral", "SIGTERM")} == {(e["rank"], e["kind"], e["signal"]) for e in failed}
    assert [None, None] == [r["early_module_rank_at_import"] for r in records(out, 2, 2)]


# -- the spawner's side, through the supervisor --------------------------------------------


@pytest.fixture(params=[True, False], ids=["cgroup-where-allowed", "process-groups-only"])
def supervisor(request: pytest.FixtureRequest) -> Iterator[tuple[ProcessSupervisor, list[WorkerExit]]]:
    exits: list[WorkerExit] = []
    supervised = ProcessSupervisor("test-node", exits.append, cgroup=request.param)
    yield supervised, exits
    supervised.close()


def spec(tmp_path: Path, attempt: int, argv: list[str], **extra: str) -> WorkerSpec:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTIC_", "TORCHELASTIC_"))}
    env.update({"RANK": "0", "WORLD_SIZE": "1", "ELASTIC_ATTEMPT": str(attempt), "MASTER_PORT": str(20000 + attempt)})
    env.update(extra)
    return WorkerSpec(
        attempt, 0, 0, "test-node", tuple(argv), env, str(tmp_path / f"attempt-{attempt}.log"),
        prewarm=("prewarm_early",), prewarm_delay_s=0.0,
    )


def warm_interpreters(supervised: ProcessSupervisor) -> list[int]:
    """This test's warm interpreters (run by the spawner's prewarm.py) still waiting for a launch."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = child.cmdline()
        except psutil.Error:
            continue
        running = {w.pid for w in supervised.running()}
        if any(part.endswith("prewarm.py") for part in cmdline) and child.pid not in running:
            found.append(child.pid)
    return found


def run_attempt(
    supervised: ProcessSupervisor, exits: list[WorkerExit], spec_: WorkerSpec, out: Path
) -> dict[str, Any]:
    """Start one rank, wait for its exit, drain as the driver does; its record."""
    before = len(exits)
    supervised.start([spec_])
    wait_for(lambda: len(exits) > before or None, "the rank's exit")
    wait_for(lambda: warm_interpreters(supervised) or None, "a warm interpreter for the next attempt")
    supervised.stop(signal.SIGTERM, 1.0)
    assert 0 == exits[-1].returncode, exits[-1].log_tail
    [record] = records(out, spec_.attempt, 1)
    return record


def test_a_warm_interpreter_is_used_only_when_the_environment_is_the_same_but_for_the_launch_variables(
    supervisor: tuple[ProcessSupervisor, list[WorkerExit]], tmp_path: Path
) -> None:
    supervised, exits = supervisor
    out = tmp_path / "records"
    out.mkdir()
    argv = script("prewarm_probe.py", out)
    assert {"RANK", "MASTER_PORT", "ELASTIC_ATTEMPT"} <= LAUNCH_VARIABLES
    # An environment larger than a pipe holds (64 KiB): the launch message must not block the spawner.
    big = {f"BIG_{i}": str(i) * 50_000 for i in range(4)}

    first = run_attempt(supervised, exits, spec(tmp_path, 0, argv, USER_SETTING="a", **big), out)
    second = run_attempt(supervised, exits, spec(tmp_path, 1, argv, USER_SETTING="a", **big), out)  # same but ports
    third = run_attempt(supervised, exits, spec(tmp_path, 2, argv, USER_SETTING="b", **big), out)  # user's changed
    fourth = run_attempt(supervised, exits, spec(tmp_path, 3, argv, USER_SETTING="b", **big), out)

    assert ["0", None, "0", None] == [r["early_module_rank_at_import"] for r in (first, second, third, fourth)]
    assert "b" == third["late_module_env_at_import"]["USER_SETTING"] == fourth["environ"]["USER_SETTING"]
    assert big["BIG_3"] == fourth["late_module_env_at_import"]["BIG_3"]
    assert ["20001", "20003"] == [r["environ"]["MASTER_PORT"] for r in (second, fourth)]


def test_a_warm_rank_exits_and_dies_like_a_cold_one_and_leaves_nothing(
    supervisor: tuple[ProcessSupervisor, list[WorkerExit]], tmp_path: Path
) -> None:
    """Exit statuses (an exception's 1, SIGKILL, SIGTERM) read right; idle warm ones go with the spawner."""
    supervised, exits = supervisor
    out = tmp_path / "records"
    out.mkdir()
    run_attempt(supervised, exits, spec(tmp_path, 0, script("prewarm_probe.py", out)), out)

    supervised.start([spec(tmp_path, 1, script("prewarm_probe.py", out, "--raise"))])
    [raised] = wait_for(lambda: exits[1:] or None, "the raising rank's exit")
    assert 1 == raised.returncode
    log = (tmp_path / "attempt-1.log").read_text()
    assert "ValueError: probe raised as asked" in log and "prewarm.py" not in log
    assert [None] == [r["early_module_rank_at_import"] for r in records(out, 1, 1)]
    supervised.stop(signal.SIGTERM, 1.0)

    for attempt, signum in ((2, signal.SIGKILL), (3, signal.SIGTERM)):
        wait_for(lambda: warm_interpreters(supervised) or None, "a warm interpreter")
        supervised.start([spec(tmp_path, attempt, script("prewarm_probe.py", out, "--sleep"))])
        wait_for(lambda: (out / f"attempt-{attempt}-rank-0.json").exists() or None, "the sleeper's record")
        assert records(out, attempt, 1)[0]["early_module_rank_at_import"] is None
        [sleeper] = supervised.running()
        os.kill(sleeper.pid, signum)
        [exit] = wait_for(lambda: exits[attempt:] or None, f"the exit of a warm rank sent {signum.name}")
        assert (sleeper.pid, -signum) == (exit.pid, exit.returncode)
        supervised.stop(signal.SIGTERM, 1.0)

    idle = wait_for(lambda: warm_interpreters(supervised) or None, "a warm interpreter")
    supervised.close()
    wait_for(lambda: not any(is_alive(pid) for pid in idle) or None, "idle warm interpreters gone")


@pytest.mark.parametrize("double_fork", [False, True], ids=["setsid-child", "double-fork"])
def test_the_drain_sweeps_a_daemon_that_a_warm_rank_left(
    supervisor: tuple[ProcessSupervisor, list[WorkerExit]], tmp_path: Path, pid_dir: Path, double_fork: bool
) -> None:
    """A warm rank's daemon, in a session of its own, is swept after the drain as a cold rank's is."""
    supervised, exits = supervisor
    options = ["--double-fork"] if double_fork else []
    for attempt in (0, 1):
        waiting = wait_for(lambda: warm_interpreters(supervised) or None, "a warm one") if attempt else []
        supervised.start([spec(tmp_path, attempt, script("start_daemon.py", pid_dir, *options, "--exit", 0))])
        rank, daemon = read_pids(pid_dir, 1)
        wait_for(lambda: exits[attempt:] or None, "the rank's exit")
        assert (rank, 0) == (exits[attempt].pid, exits[attempt].returncode)
        assert (rank in waiting) == (attempt == 1), "attempt 1's rank should be the warm interpreter"
        assert is_alive(daemon), "the daemon should have survived its rank's group kill"

        supervised.stop(signal.SIGTERM, 1.0)

        assert not is_alive(daemon)
        for pid_file in pid_dir.iterdir():
            pid_file.unlink()


# -- without --prewarm: what the rank imported, learned at its first step --------------------


def waiting_warm_interpreters(root: int) -> list[int]:
    """Warm interpreters (the spawner's prewarm.py) under launcher ``root`` not yet handed a rank."""
    found = []
    for child in psutil.Process(root).children(recursive=True):
        try:
            if any(part.endswith("prewarm.py") for part in child.cmdline()) and "RANK" not in child.environ():
                found.append(child.pid)
        except psutil.Error:
            continue
    return found


def test_without_prewarm_the_next_attempt_starts_warm_with_what_the_ranks_imported(
    launcher: Launcher, tmp_path: Path
) -> None:
    """No flag: at each rank's first step its successor starts importing what the rank imported
    (torch), and after the failure both ranks run in those interpreters, torch already there;
    the journal and the report count them and the memory they held."""
    pytest.importorskip("torch")
    process = launcher.start("--nproc-per-node", 2, "--max-restarts", 1,
                             command=script("learned_prewarm.py", tmp_path))
    wait_for(lambda: len(waiting_warm_interpreters(process.pid)) == 2 or None, "two warm successors", timeout_s=60)
    (tmp_path / "go").touch()
    finished = launcher.finished(process)

    assert 0 == finished.returncode, finished.explain()
    for rank in (0, 1):
        assert "torch imported before the script: False" in finished.rank_log(0, rank)
        assert "torch imported before the script: True" in finished.rank_log(1, rank)
    [started] = finished.events("ranks_started")
    assert (1, [0, 1], []) == (started["attempt"], started["warm"], started["cold"])
    assert started["warm_resident_mb"] > 0
    [warm_attempt] = [a for a in finished.report()["attempts"] if a["attempt"] == 1]
    assert [0, 1] == warm_attempt["ranks_started"]["warm"]
    assert warm_attempt["ranks_started"]["warm_resident_mb"] > 0


def _restarted_with_learned_successors(launcher: Launcher, tmp_path: Path, site: Path, *args: object) -> Finished:
    """``learned_prewarm.py ARGS`` with ``site`` first on PYTHONPATH, two ranks: once both warm
    successors wait, rank 1 fails and attempt 1 is handed to them."""
    env = launcher_env(PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    process = launcher.start("--nproc-per-node", 2, "--max-restarts", 1, env=env,
                             command=script("learned_prewarm.py", tmp_path, *args))
    wait_for(lambda: len(waiting_warm_interpreters(process.pid)) == 2 or None, "two warm successors", timeout_s=60)
    (tmp_path / "go").touch()
    return launcher.finished(process)


def test_a_learned_package_brings_the_modules_one_level_down_that_the_rank_imported(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A module of an installed package that the package's own import leaves out (``torch._dynamo``
    beside ``torch``) is learned too: the warm successor has it imported before the script runs."""
    pytest.importorskip("torch")
    site = tmp_path / "site-packages"
    (site / "lazy_pkg").mkdir(parents=True)
    (site / "lazy_pkg" / "__init__.py").write_text("")
    (site / "lazy_pkg" / "heavy.py").write_text("")
    finished = _restarted_with_learned_successors(launcher, tmp_path, site, "--import", "lazy_pkg.heavy")

    assert 0 == finished.returncode, finished.explain()
    for rank in (0, 1):
        assert "lazy_pkg.heavy imported before the script: False" in finished.rank_log(0, rank)
        assert "lazy_pkg.heavy imported before the script: True" in finished.rank_log(1, rank)


def test_a_learned_module_that_reads_an_attempts_variable_at_import_means_a_cold_start(
    launcher: Launcher, tmp_path: Path
) -> None:
    """An installed package that reads RANK when imported would keep the warm interpreter's (none):
    the warm one notices the read and runs the rank's command cold, which reads its own RANK."""
    pytest.importorskip("torch")
    site = tmp_path / "site-packages"
    (site / "rank_at_import").mkdir(parents=True)
    (site / "rank_at_import" / "__init__.py").write_text('import os\nRANK = os.environ.get("RANK")\n')
    finished = _restarted_with_learned_successors(launcher, tmp_path, site, "--import", "rank_at_import")

    assert 0 == finished.returncode, finished.explain()
    for rank in (0, 1):
        log = finished.rank_log(1, rank)
        assert "importing rank_at_import read RANK, which each attempt sets anew: this rank starts cold" in log
        assert f"rank_at_import read RANK={rank} at import" in log  # its own, cold
        assert "torch imported before the script: False" in log


def test_a_sitecustomize_that_reads_an_attempts_variable_at_start_up_means_a_cold_start(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A ``sitecustomize`` of the user's that reads RANK when the interpreter starts (to install a
    hook in ranks only, say) would have run in the warm interpreter with none: the rank bootstrap
    watches from before it runs, and the rank's command runs cold, its sitecustomize seeing its RANK."""
    pytest.importorskip("torch")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text('import os\nprint(f"sitecustomize read RANK={os.environ.get(\'RANK\')}")\n')
    finished = _restarted_with_learned_successors(launcher, tmp_path, site)

    assert 0 == finished.returncode, finished.explain()
    for rank in (0, 1):
        log = finished.rank_log(1, rank)
        assert ("elastic: this interpreter's start-up (a sitecustomize or usercustomize) read RANK, which each "
                "attempt sets anew: this rank starts cold") in log
        assert f"sitecustomize read RANK={rank}" in log  # its own, cold
        assert "torch imported before the script: False" in log


def _both_ranks_restart_warm_after_rank_1_is_sigkilled(launcher: Launcher, tmp_path: Path, *args: object) -> Finished:
    """``rank0_prints.py DIR ARGS``, two gloo ranks: once both warm successors wait, rank 1 is
    SIGKILLed; attempt 1 must have run both ranks warm, torch imported before the script."""
    process = launcher.start("--nproc-per-node", 2, "--max-restarts", 1,
                             command=script("rank0_prints.py", tmp_path, *args))
    wait_for(lambda: len(waiting_warm_interpreters(process.pid)) == 2 or None, "two warm successors", timeout_s=90)
    _, rank_1 = read_pids(tmp_path / "attempt-0", 2)
    os.kill(rank_1, signal.SIGKILL)
    finished = launcher.finished(process)

    assert 0 == finished.returncode, finished.explain()
    [started] = finished.events("ranks_started")
    assert (1, [0, 1], []) == (started["attempt"], started["warm"], started["cold"])
    for rank in (0, 1):
        assert "torch imported before the script: False" in finished.rank_log(0, rank)
        assert "torch imported before the script: True" in finished.rank_log(1, rank)
    return finished


def test_a_rank_that_prints_no_step_gets_its_warm_successor_once_its_distributed_init_returned(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A DDP script where only rank 0 prints its steps: rank 1 never shows one, yet its successor
    starts once its init_process_group returned, and after rank 1 is SIGKILLed both ranks of the
    next attempt start warm (rank 0 no longer waits in its init for a cold rank 1)."""
    pytest.importorskip("torch")
    finished = _both_ranks_restart_warm_after_rank_1_is_sigkilled(launcher, tmp_path)
    assert all(e["rank"] == 0 for e in finished.events("first_step_seen"))


def test_a_program_that_prints_no_step_at_all_restarts_warm(launcher: Launcher, tmp_path: Path) -> None:
    """No rank prints a step (the progress goes to a file): every rank still gets its warm
    successor, and the restart runs both warm."""
    pytest.importorskip("torch")
    finished = _both_ranks_restart_warm_after_rank_1_is_sigkilled(launcher, tmp_path, "--silent")
    assert [] == [e for e in finished.events("first_step_seen") if e["attempt"] == 0]


def test_a_warm_rank_shows_its_command_and_elastic_status_lists_its_pid(launcher: Launcher, tmp_path: Path) -> None:
    """After a warm restart each new rank's /proc/PID/cmdline (what ps and pgrep -f read) is the
    user's command, not the waiting interpreter's prewarm.py, its short name the interpreter's; a
    child it starts still sees its RANK; and `elastic status` lists each rank's pid."""
    pytest.importorskip("torch")
    command = script("rank0_prints.py", tmp_path, "--hold")
    process = launcher.start("--nproc-per-node", 2, "--max-restarts", 1, command=command)
    wait_for(lambda: len(waiting_warm_interpreters(process.pid)) == 2 or None, "two warm successors", timeout_s=90)
    cold_comm = Path(f"/proc/{read_pids(tmp_path / 'attempt-0', 2)[0]}/comm").read_text()
    os.kill(read_pids(tmp_path / "attempt-0", 2)[1], signal.SIGKILL)
    pids = read_pids(tmp_path / "attempt-1", 2, timeout_s=120)
    try:
        for pid in pids:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            assert b"prewarm.py" not in cmdline
            assert [str(word) for word in command] == cmdline.replace(b"\0", b" ").decode().split()
            assert cold_comm == Path(f"/proc/{pid}/comm").read_text()
        found = subprocess.run(["pgrep", "-f", "rank0_prints.py"], capture_output=True, text=True, check=False)
        assert set(pids) <= {int(word) for word in found.stdout.split()}
        status = status_text(launcher.run_dir)
        assert f"pids of attempt 1: rank 0 {pids[0]}, rank 1 {pids[1]} (node " in status, status
    finally:
        (tmp_path / "release").touch()
    finished = launcher.finished(process)

    assert 0 == finished.returncode, finished.explain()
    [started] = finished.events("ranks_started")
    assert (1, [0, 1]) == (started["attempt"], started["warm"])
    for rank in (0, 1):
        assert f"a child sees RANK={rank}" in finished.rank_log(1, rank)
    assert [{"0": pids[0], "1": pids[1]}] == [e["pids"] for e in finished.events("rank_pids") if e["attempt"] == 1]


def test_prewarm_memory_0_keeps_every_rank_cold(launcher: Launcher, tmp_path: Path) -> None:
    """`--prewarm-memory 0`: no warm successor, and attempt 1 starts cold as before."""
    pytest.importorskip("torch")
    process = launcher.start("--nproc-per-node", 2, "--max-restarts", 1, "--prewarm-memory", 0,
                             command=script("learned_prewarm.py", tmp_path))
    journal = launcher.run_dir / "journal.jsonl"
    # Journaled after both ranks' first steps were read, which is when a successor would start.
    wait_for(lambda: journal.exists() and '"startup_profiled"' in journal.read_text() or None,
             "attempt 0's start-up profile", timeout_s=60)
    assert [] == waiting_warm_interpreters(process.pid)
    (tmp_path / "go").touch()
    finished = launcher.finished(process)

    assert 0 == finished.returncode, finished.explain()
    for rank in (0, 1):
        assert "torch imported before the script: False" in finished.rank_log(1, rank)
    assert [] == finished.events("ranks_started")


def test_warm_successors_learned_from_the_ranks_stay_within_the_memory_budget(tmp_path: Path) -> None:
    """The pool starts a successor only while the warm ones it started so (counted at the larger of
    the rank's estimate and their own resident memory) and the new estimate fit the budget."""
    from elastic.node.probes.memory_limit import memory_kb
    from elastic.node.spawner.prewarm_pool import PrewarmPool

    total_kb = memory_kb()[0]  # the host's, or this job's cgroup limit where it sets one
    budget_kb = total_kb // 100  # --prewarm-memory 1
    pool = PrewarmPool(cgroup=None)
    argv = [sys.executable, str(BIN / "print_lines.py")]
    command = {"prewarm": [], "prewarm_memory_pct": 1.0, "launch_vars": sorted(LAUNCH_VARIABLES), "attempt": 0}
    key = pool.note_spawn(argv, dict(os.environ), str(tmp_path), command)
    assert key is not None
    for rank_pid in (1001, 1002, 1003):  # the ranks' pids, as the spawner knows them
        pool.schedule(rank_pid, key, argv, dict(os.environ), str(tmp_path), command)
    try:
        over = pool.learned(1001, ["json"], budget_kb + 1)
        fits = pool.learned(1002, ["json"], 1024)
        assert over is not None and fits is not None
        assert (False, "over --prewarm-memory") == (over["started"], over["why"])
        assert fits["started"] and is_alive(fits["warm_pid"])
        # Now the one running counts: its own resident memory (at least the 1 MiB estimate) and this
        # estimate together pass the budget by a KiB.
        squeezed = pool.learned(1003, ["json"], budget_kb - 1024 + 1)
        assert squeezed is not None and (False, "over --prewarm-memory") == (squeezed["started"], squeezed["why"])
        assert squeezed["held_kb"] >= 1024
        assert pool.learned(1002, ["json"], 1024) is None  # once per rank
    finally:
        warm = pool.pids()
        pool.drop(older_than=None)
        for pid in warm:
            os.waitpid(pid, 0)
