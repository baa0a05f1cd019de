"""Survivors stay: a rank keeps its process through a peer's loss, and the run ends bit-identical.

elastic's launcher does not yet re-form a world in place (docs/design/in-place-restart.md says
what is left), so these tests play its part the way it will: they host the process group's
``TCPStore`` (not rank 0), start two gloo DDP ranks of tests/bin/inplace_train.py on
:mod:`elastic.worker.inplace`, kill or stop rank 1 mid-run, decide the next world with
:func:`elastic.core.inplace.reform.next_world`, write the survivor's notice file and start the
replacement rank with the lost rank's identity (a cold process: warm spares are not built yet).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from harness import BIN, REPO, differing_tensors, launcher_env, wait_for

from elastic.core.inplace.reform import Reform, next_world, notices
from elastic.worker.inplace.notice import GENERATION_VAR, NOTICE_VAR, SPARE_VAR, STORE_VAR, write_notice

torch = pytest.importorskip("torch")

STEPS, FAIL_AFTER_STEP, STEP_S = 20, 6, 0.05
START_S = 90.0  # a cold rank imports torch: slow on a loaded machine, and no claim about speed


class World:
    """The launcher's part: the store, the ranks it started (stopped by pid at the end), their files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.store = torch.distributed.TCPStore(
            "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=120)
        )
        self.address = f"127.0.0.1:{self.store.port}"
        self.ranks: list[subprocess.Popen[bytes]] = []

    def start(self, rank: int, world_size: int, generation: int, name: str) -> subprocess.Popen[bytes]:
        """Start a rank of ``generation``; its notice file and log are named after ``name``."""
        return self._start(name, RANK=str(rank), WORLD_SIZE=str(world_size), **{GENERATION_VAR: str(generation)})

    def start_spare(self, name: str) -> subprocess.Popen[bytes]:
        """Start a warm spare: the same script, with no place until its notice file hands it one."""
        return self._start(name, **{SPARE_VAR: "1"})

    def _start(self, name: str, **variables: str) -> subprocess.Popen[bytes]:
        env = launcher_env(**variables, **{STORE_VAR: self.address, NOTICE_VAR: str(self.notice_path(name))})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        with open(self.directory / f"{name}.log", "wb") as log:
            process = subprocess.Popen(
                [sys.executable, str(BIN / "inplace_train.py"), str(STEPS), str(self.directory / "final.pt"),
                 str(self.progress_path(name)), str(STEP_S)],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        self.ranks.append(process)
        return process

    def notice_path(self, name: str) -> Path:
        return self.directory / f"{name}.notice"

    def progress_path(self, name: str) -> Path:
        return self.directory / f"{name}.progress"

    def progress(self, name: str) -> list[tuple[int, int, int, float]]:
        """Each step the rank finished: (step, generation, pid, time)."""
        path = self.progress_path(name)
        lines = path.read_text().splitlines() if path.exists() else []
        return [(int(s), int(g), int(p), float(t)) for s, g, p, t in (line.split() for line in lines)]

    def finish(self, *processes: subprocess.Popen[bytes]) -> list[int | None]:
        """Wait for ``processes`` (all the ranks started when none is named) to end; their return codes."""
        deadline_at = time.monotonic() + START_S
        for process in processes or tuple(self.ranks):
            try:
                process.wait(max(0.1, deadline_at - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        return [process.poll() for process in processes or self.ranks]

    def log(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text(errors="replace")[-3000:]

    def stop_all(self) -> None:
        for process in self.ranks:
            if process.poll() is None:
                process.kill()  # by its pid: SIGKILL works on a stopped process too
                process.wait()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    started = World(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The final weights of the same two ranks with no failure."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    baseline = World(directory)
    try:
        for rank in (0, 1):
            baseline.start(rank, 2, 0, f"rank{rank}")
        codes = baseline.finish()
        assert [0, 0] == codes, baseline.log("rank0") + baseline.log("rank1")
    finally:
        baseline.stop_all()
    assert {0} == {generation for _, generation, _, _ in baseline.progress("rank0")}
    return directory / "final.pt"


def _lose_rank_1(
    world: World, how: signal.Signals, *, warm: bool
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes], float]:
    """Start both ranks (and a warm spare if ``warm``), send ``how`` to rank 1 once rank 0 finished
    FAIL_AFTER_STEP steps, and do what the launcher will: decide the next world, tell the survivor,
    hand rank 1's place to the spare or to a new process started into generation 1."""
    survivor = world.start(0, 2, 0, "rank0")
    victim = world.start(1, 2, 0, "rank1")
    spare = world.start_spare("replacement") if warm else None
    wait_for(lambda: len(world.progress("rank0")) >= FAIL_AFTER_STEP, "rank 0's first steps", START_S)
    os.kill(victim.pid, how)
    lost_at = time.time()
    reform = next_world(0, 2, {1}, spares=1, min_world_size=2)
    assert isinstance(reform, Reform) and reform.identical
    told, (place,) = notices(reform, world.address)
    write_notice(str(world.notice_path("rank0")), told[0])
    if spare is not None:
        write_notice(str(world.notice_path("replacement")), place)
        return survivor, spare, lost_at
    return survivor, world.start(place.rank, place.world_size, place.generation, "replacement"), lost_at


def _assert_survived_in_place(
    world: World, survivor: subprocess.Popen[bytes], replacement: subprocess.Popen[bytes], lost_at: float, uninterrupted: Path
) -> None:
    assert [0, 0] == world.finish(survivor, replacement), world.log("rank0") + world.log("replacement")
    steps = world.progress("rank0")
    assert {survivor.pid} == {pid for _, _, pid, _ in steps}, "the survivor kept its process"
    assert {0, 1} == {generation for _, generation, _, _ in steps}
    redone = [step for step, generation, _, _ in steps if generation == 1]
    assert redone == list(range(redone[0], STEPS + 1)) and redone[0] <= FAIL_AFTER_STEP + 2
    assert [step for step, _, _, _ in world.progress("replacement")] == redone, "the replacement took up the same step"
    assert [] == differing_tensors(uninterrupted, world.directory / "final.pt")
    first_again = min(at for _, generation, _, at in steps if generation == 1)
    print(f"loss of rank 1 -> the survivor's first step of generation 1: {first_again - lost_at:.3f}s")


def test_a_survivor_keeps_its_process_through_a_peers_sigkill_and_a_warm_spare_ends_it_bit_identical(
    world: World, uninterrupted: Path
) -> None:
    """Rank 1 SIGKILLed mid-run: rank 0 leaves the broken all-reduce and joins generation 1 on the
    launcher's store with a spare that had waited, script started, for a place; the spare receives
    the last step committed in rank 0's memory, both redo the step in flight, and the final weights
    (dropout and Adam included) match a run with no failure to the bit."""
    _assert_survived_in_place(world, *_lose_rank_1(world, signal.SIGKILL, warm=True), uninterrupted)


def test_a_survivor_leaves_an_all_reduce_hung_on_a_stopped_peer_when_the_launcher_says_so(
    world: World, uninterrupted: Path
) -> None:
    """Rank 1 SIGSTOPped (its sockets stay open, gloo would wait out its 120 s timeout): the notice
    alone makes rank 0 shut its group's sockets and re-form with a rank started into generation 1,
    and the result is still bit-identical."""
    _assert_survived_in_place(world, *_lose_rank_1(world, signal.SIGSTOP, warm=False), uninterrupted)
