"""Hung ranks, for real: heartbeats stop, the node agent dumps stacks, kills, and the run restarts."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from harness import BIN, Finished, Launcher, launcher_env, per_rank, script, wait_for

from elastic.core.failures import WorkerExit
from elastic.worker.heartbeat import HEARTBEAT_FILE_VAR
from elastic.node.agent import NodeAgent
from elastic.core.launch.spec import WorkerSpec
from elastic.node.probes.stacks import (
    NATIVE_UNAVAILABLE,
    PY_SPY_MISSING,
    StackTarget,
    dump_before_kill,
    dump_group,
    find_py_spy,
    write_stack_dumps,
)
from elastic.testing import FakeClock

TIMEOUT_S = 2.0
# The bound on detection is timeout + 1 s; the watcher's own worst case
# is timeout + the beat interval (0.1 s) + one check interval (0.5 s here), so
# this leaves room for a busy host.
DETECTION_BOUND_S = TIMEOUT_S + 1.0


def _wall(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["time"]).timestamp()


def _hung(finished: Finished) -> dict[str, Any]:
    failed = [e for e in finished.events("worker_failed") if e["kind"] != "collateral"]
    assert 1 == len(failed), finished.explain()
    return failed[0]


def test_rank_that_stops_beating_is_hung_dumped_killed_and_restarted(launcher: Launcher) -> None:
    """A rank that stops calling heartbeat() is hung within timeout + 1 s; its stacks name where."""
    finished = launcher.run(
        "--nproc-per-node", 2,
        "--max-restarts", 1,
        "--heartbeat-timeout", TIMEOUT_S,
        command=script("goes_silent.py", "api", 0, 1),
    )

    assert 0 == finished.returncode, finished.explain()
    hung = _hung(finished)
    assert ("hung", 1, 0, "SIGKILL") == (hung["kind"], hung["rank"], hung["attempt"], hung["signal"])
    assert "no heartbeat for" in hung["message"]
    beat = json.loads((finished.run_dir / "attempt-0" / "rank-1.heartbeat").read_text())
    latency_s = _wall(hung) - beat["time"]
    print(f"hang detected {latency_s:.3f}s after the last beat (timeout {TIMEOUT_S}s)")
    assert TIMEOUT_S - 0.05 <= latency_s <= DETECTION_BOUND_S
    [scheduled] = finished.events("restart_scheduled")
    assert "failures" == scheduled["budget"]
    report = finished.report()
    assert ("succeeded", 2) == (report["outcome"], len(report["attempts"]))

    stacks = finished.run_dir / "attempt-0" / "stacks"
    assert ["rank-0.txt", "rank-1.txt"] == sorted(p.name for p in stacks.iterdir())
    dump = (stacks / "rank-1.txt").read_text()
    if find_py_spy() is None:
        assert PY_SPY_MISSING in dump and PY_SPY_MISSING in hung["message"]
    else:
        assert "stuck_in_allreduce" in dump, dump
        assert "stacks of this node's ranks in" in hung["message"]
        assert "goes_silent.py" in (stacks / "rank-0.txt").read_text()


def test_output_source_calls_a_silent_rank_hung(launcher: Launcher) -> None:
    """With --heartbeat-source output, a rank that stops printing is hung; no API call needed."""
    finished = launcher.run(
        "--nproc-per-node", 2,
        "--max-restarts", 1,
        "--heartbeat-timeout", TIMEOUT_S,
        "--heartbeat-source", "output",
        command=script("goes_silent.py", "output", 0, 0),
    )

    assert 0 == finished.returncode, finished.explain()
    hung = _hung(finished)
    assert ("hung", 0, 0) == (hung["kind"], hung["rank"], hung["attempt"])
    assert "no output for" in hung["message"]
    assert "step 5" in finished.rank_log(0, 0)
    assert "succeeded" == finished.report()["outcome"]


def test_rank_with_no_first_beat_within_startup_timeout_is_hung(launcher: Launcher) -> None:
    """A rank that never beats is hung once --startup-timeout runs out; exit status 137."""
    finished = launcher.run(
        "--heartbeat-timeout", 1, "--startup-timeout", 1,
        command=script("never_beats.py", 30),
    )

    assert 137 == finished.returncode, finished.explain()
    hung = _hung(finished)
    assert "hung" == hung["kind"]
    assert "no first heartbeat within --startup-timeout 1s" in hung["message"]
    assert hung["silent_s"] >= 1.0  # silent since it started
    assert "hung" == finished.report()["root_cause"]["kind"]


def test_without_heartbeat_timeout_nothing_is_called_hung(launcher: Launcher) -> None:
    """With no --heartbeat-timeout a silent rank is left alone, however long it is silent."""
    finished = launcher.run("--max-restarts", 1, command=script("never_beats.py", 3))

    assert 0 == finished.returncode, finished.explain()
    assert [] == finished.events("worker_failed")
    assert not (finished.run_dir / "attempt-0" / "stacks").exists()


# -- stack dumps on their own -------------------------------------------------------------


@pytest.fixture
def stuck(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A process group led by a shell whose Python child sleeps in stuck_in_allreduce()."""
    pid_file = tmp_path / "stuck.pid"
    command = shlex.join(script("stuck_in_function.py", pid_file)) + "; true"  # no exec: sh stays
    process = subprocess.Popen(["/bin/sh", "-c", command], start_new_session=True)
    try:
        wait_for(pid_file.exists, "the stuck process to start")
        yield process, tmp_path
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the group this fixture started, by its id
        process.wait(10)


@pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed")
def test_dump_names_the_function_a_wrapped_rank_is_stuck_in(
    stuck: tuple[subprocess.Popen[bytes], Path],
) -> None:
    """A rank run through a shell is dumped whole: the shell fails, its Python child is read."""
    process, tmp_path = stuck
    target = StackTarget(rank=3, pid=process.pid, path=str(tmp_path / "stacks" / "rank-3.txt"))

    assert None is write_stack_dumps([target], header="test", py_spy=find_py_spy())

    dump = Path(target.path).read_text()
    assert dump.startswith(f"# rank 3, pid {process.pid}: test")
    assert "stuck_in_allreduce (stuck_in_function.py" in dump, dump


def test_without_py_spy_the_dump_file_says_how_to_install_it(
    stuck: tuple[subprocess.Popen[bytes], Path],
) -> None:
    """No py-spy: the file and the return value say so, with the command that installs it."""
    process, tmp_path = stuck
    target = StackTarget(rank=0, pid=process.pid, path=str(tmp_path / "stacks" / "rank-0.txt"))

    assert PY_SPY_MISSING == write_stack_dumps([target], header="test", py_spy=None)
    assert "pip install 'elastic-launch[debug]'" in Path(target.path).read_text()


def test_a_dump_that_never_answers_is_cut_off(stuck: tuple[subprocess.Popen[bytes], Path]) -> None:
    """A stack tool that hangs is killed at the timeout; the dump says so and the call returns."""
    process, tmp_path = stuck
    target = StackTarget(rank=0, pid=process.pid, path=str(tmp_path / "rank-0.txt"))

    started = time.monotonic()
    write_stack_dumps([target], header="test", py_spy=str(BIN / "slow_tool.py"), timeout_s=1.0)

    assert time.monotonic() - started < 30.0  # bounded (1 s asked; generous for a busy host)
    assert "timed out" in Path(target.path).read_text()


def test_elastic_stack_dumps_every_live_rank(launcher: Launcher, tmp_path: Path) -> None:
    """`elastic stack` on a running job shows each rank's Python stack, by rank."""
    if find_py_spy() is None:
        pytest.skip("py-spy is not installed")
    process = launcher.start("--nproc-per-node", 2, command=per_rank(
        ["stuck_in_function.py", tmp_path / "r0"], ["stuck_in_function.py", tmp_path / "r1"]))
    wait_for(lambda: (tmp_path / "r0").exists() and (tmp_path / "r1").exists(), "both ranks stuck")
    shown = subprocess.run([sys.executable, "-m", "elastic", "stack", str(launcher.run_dir)],
                           capture_output=True, text=True, timeout=120, env=launcher_env())
    process.terminate()
    assert 143 == launcher.finished(process).returncode
    assert 0 == shown.returncode, shown.stderr
    for rank in (0, 1):
        assert f"==== rank {rank} (node this machine, attempt 0) ====" in shown.stdout
    frames = [line.strip() for line in shown.stdout.splitlines() if "stuck_in_allreduce (" in line]
    assert 2 == sum(frame.startswith("stuck_in_allreduce (stuck_in_function.py:12)") for frame in frames), shown.stdout
    assert 2 == shown.stdout.count("# main thread is in stuck_in_allreduce (stuck_in_function.py:12), waiting in")
    assert shown.stdout.count("(libc.so") >= 2, shown.stdout  # native frames


def test_a_group_dump_is_bounded_on_the_injected_clock(stuck: tuple[subprocess.Popen[bytes], Path]) -> None:
    """Once the injected clock is past the bound, no member is dumped (py-spy never runs)."""
    process, _ = stuck
    readings = iter([0.0] + [11.0] * 64)  # the deadline is taken at 0; every later reading is past it
    dump = dump_group("/nonexistent/py-spy", process.pid, timeout_s=10.0, clock=lambda: next(readings))

    parts = [part for part in dump.split("\n") if part]
    assert len(parts) >= 2, dump  # the shell and its Python child
    assert all(part.endswith("not dumped, out of time") for part in parts), dump


# -- native frames, and the frame that explains the hang -----------------------------------

needs_py_spy = pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed")


# The lines hangs_natively.py blocks on: in wait_for_the_peer(), then in flush_metrics().
PEER_LINE, FLUSH_LINE = [
    n for n, line in enumerate((BIN / "hangs_natively.py").read_text().splitlines(), 1) if "# never returns" in line
]


def _assert_native(dump: str) -> None:
    """The dump has native frames: the C library under the interpreter's lock wait."""
    assert "PyThread_acquire_lock_timed (" in dump and "(libc.so" in dump, dump
    assert NATIVE_UNAVAILABLE not in dump


@needs_py_spy
@pytest.mark.parametrize(
    "flags",
    [["--heartbeat-timeout", TIMEOUT_S, "--heartbeat-source", "output"], ["--stall-timeout", 1.5]],
    ids=["heartbeat-timeout", "stall-timeout"],
)
def test_a_rank_hung_in_a_native_wait_is_dumped_with_native_frames_and_named(
    launcher: Launcher, flags: list[object]
) -> None:
    """A rank blocked on a lock: its dump has native frames, and the hang's message, the
    summary and the dump's header name the frame it waits in."""
    finished = launcher.run("--max-restarts", 0, *flags, command=script("hangs_natively.py", "lock", 0))

    assert 137 == finished.returncode, finished.explain()
    hung = _hung(finished)
    dump = (finished.run_dir / "attempt-0" / "stacks" / "rank-0.txt").read_text()
    _assert_native(dump)
    named = f"rank 0's main thread is in wait_for_the_peer (hangs_natively.py:{PEER_LINE}), waiting in PyThread_acquire_lock_timed"
    assert named in hung["message"], hung["message"]
    assert f"# {named}" in dump.splitlines()[1], dump
    summary = finished.stderr[finished.stderr.index("root cause:"):]
    assert named in summary, summary


@needs_py_spy
@pytest.mark.parametrize(
    ("mode", "named"),
    [
        (
            "atexit",
            "rank 1's main thread is at interpreter exit (in the at-exit handler or finalizer "
            f"flush_metrics (hangs_natively.py:{FLUSH_LINE})), waiting in PyThread_acquire_lock_timed",
        ),
        ("atexit-native", "rank 1's main thread is at interpreter exit (no Python frame left), in pause (libc.so"),
    ],
    ids=["python-handler", "c-handler"],
)
def test_a_rank_hung_in_an_at_exit_handler_is_named_at_interpreter_exit(
    launcher: Launcher, mode: str, named: str
) -> None:
    """Rank 1 finishes but its at-exit handler never returns: killed after --exit-timeout,
    its dump has native frames and the message says the interpreter was exiting, and where
    (a C handler leaves no Python frame: a Python-only dump showed nothing)."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--exit-timeout", 1, "--max-restarts", 0,
        command=script("hangs_natively.py", mode, 1),
    )

    [hung] = [e for e in finished.events("worker_failed") if e["kind"] != "collateral"]
    assert ("exit-hung", 1) == (hung["kind"], hung["rank"]), finished.explain()
    dump = (finished.run_dir / "attempt-0" / "stacks" / "rank-1.txt").read_text()
    assert "(libc.so" in dump and NATIVE_UNAVAILABLE not in dump, dump
    assert named in hung["message"], hung["message"]
    assert named in finished.stderr, finished.explain()


@needs_py_spy
@pytest.mark.parametrize("native", ["fail", "hang"])
def test_without_native_frames_the_python_frames_are_dumped_and_the_dump_says_why(
    stuck: tuple[subprocess.Popen[bytes], Path], monkeypatch: pytest.MonkeyPatch, native: str
) -> None:
    """A py-spy that cannot take native frames (fails, or never answers): the Python frames
    are dumped instead, within the bound, and the dump says native frames are missing and why."""
    process, tmp_path = stuck
    monkeypatch.setenv("FAKE_PY_SPY_NATIVE", native)
    monkeypatch.setenv("REAL_PY_SPY", str(find_py_spy()))
    target = StackTarget(rank=0, pid=process.pid, path=str(tmp_path / "rank-0.txt"))

    assert None is write_stack_dumps(
        [target], header="test", py_spy=str(BIN / "py_spy_without_native.py"), timeout_s=4.0
    )

    dump = Path(target.path).read_text()
    why = "timed out after " if native == "hang" else "failed: Error: Collecting stack traces from native"
    assert f"{NATIVE_UNAVAILABLE} (py-spy dump --native {why}" in dump, dump
    assert "stuck_in_allreduce (stuck_in_function.py" in dump, dump
    assert "# rank 0's main thread is in stuck_in_allreduce (stuck_in_function.py:12), Python frames only" in dump


@needs_py_spy
def test_a_hang_note_names_the_frames_of_three_ranks_and_counts_the_rest(tmp_path: Path) -> None:
    """Four stuck ranks: the note (in every one's message) names three, the dumps hold all."""
    stuck = [
        subprocess.Popen(script("stuck_in_function.py", tmp_path / f"r{rank}"), start_new_session=True)
        for rank in range(4)
    ]
    try:
        wait_for(lambda: all((tmp_path / f"r{rank}").exists() for rank in range(4)), "four stuck processes")
        targets = [StackTarget(rank, p.pid, str(tmp_path / "stacks" / f"rank-{rank}.txt")) for rank, p in enumerate(stuck)]
        note = dump_before_kill(targets, header="test")
    finally:
        for process in stuck:
            os.killpg(process.pid, signal.SIGKILL)  # the groups this test started, by their ids
            process.wait(10)

    frame = "main thread is in stuck_in_allreduce (stuck_in_function.py:12), waiting in"
    assert note.startswith(f"stacks in {tmp_path / 'stacks'}; rank 0's {frame}"), note
    assert [f"rank {r}'s {frame}" in note for r in range(4)] == [True, True, True, False], note
    assert note.endswith("; 1 more rank: see the dumps"), note
    assert f"# rank 3's {frame}" in (tmp_path / "stacks" / "rank-3.txt").read_text()


# -- the node agent's clock ---------------------------------------------------------------


def test_heartbeat_ages_are_read_on_the_node_agents_clock(tmp_path: Path, pid_dir: Path) -> None:
    """A rank's heartbeat age is the agent's (injected) wall clock minus the beat's time."""
    beat = tmp_path / "beat"
    beat.write_text("")
    os.utime(beat, (1_700_000_000.0, 1_700_000_000.0))
    clock = FakeClock(wall_start=1_700_000_042.0)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTIC_", "TORCHELASTIC_"))}
    env.update({"RANK": "0", HEARTBEAT_FILE_VAR: str(beat)})
    spec = WorkerSpec(0, 0, 0, "test-node", tuple(script("sleep_forever.py", pid_dir)), env,
                      str(tmp_path / "rank-0.log"))
    exits: list[WorkerExit] = []
    agent = NodeAgent("test-node", exits.append, clock=clock)
    try:
        agent.launch([spec], echo_ranks=None)
        assert {0: 42.0} == agent.heartbeat_ages()
        clock.advance(8.0)
        assert {0: 50.0} == agent.heartbeat_ages()
    finally:
        agent.stop(signal.SIGKILL, 5.0)
        agent.close()
    assert [0] == [e.rank for e in exits]
