"""Survivors stay: a rank keeps its process through a peer's loss, and the run ends bit-identical.

The worker side alone: these tests play the launcher's part by hand (the launcher's own re-forming,
`elastic run --spares`, is tests/process/test_inplace_launch.py's): they start the process group's
store in a process of its own (:mod:`elastic.worker.inplace.store_host`, not rank 0), gloo DDP
ranks of tests/bin/inplace_train.py on :mod:`elastic.worker.inplace` (and a spare of it, waiting
for a place), kill or stop a rank mid-run, decide the next world with
:func:`elastic.core.inplace.reform.next_world`, write each survivor's notice file and hand the lost
rank's place to the spare (or to a process started into the next generation, or to nobody).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import BIN, REPO, differing_tensors, launcher_env, wait_for

from elastic.core.inplace.reform import Reform, next_world, notices
from elastic.worker.inplace.notice import GENERATION_VAR, NOTICE_VAR, SPARE_VAR, STORE_VAR, write_notice

torch = pytest.importorskip("torch")

STEPS, FAIL_AFTER_STEP, STEP_S = 20, 6, 0.05
START_S = 90.0  # a cold rank imports torch: slow on a loaded machine, and no claim about speed


def _env() -> dict[str, str]:
    env = launcher_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


class World:
    """The launcher's part: the store's host process (elastic.worker.inplace.store_host), the ranks
    it started (all stopped by pid at the end), their files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        ready = directory / "store"
        self.store = subprocess.Popen(
            [sys.executable, "-m", "elastic.worker.inplace.store_host", "127.0.0.1", "0", str(ready)],
            env=_env(), stdin=subprocess.DEVNULL,
        )
        self.ranks: list[subprocess.Popen[bytes]] = []
        try:
            self.address = wait_for(lambda: ready.exists() and ready.read_text().strip(), "the store's address", START_S)
        except BaseException:
            self.stop_all()
            raise

    def start(self, rank: int, world_size: int, generation: int, name: str, **extra: str) -> subprocess.Popen[bytes]:
        """Start a rank of ``generation``; its notice file and log are named after ``name``."""
        return self._start(name, RANK=str(rank), WORLD_SIZE=str(world_size), **{GENERATION_VAR: str(generation)}, **extra)

    def start_spare(self, name: str) -> subprocess.Popen[bytes]:
        """Start a warm spare: the same script, with no place until its notice file hands it one."""
        return self._start(name, **{SPARE_VAR: "1"})

    def _start(self, name: str, **variables: str) -> subprocess.Popen[bytes]:
        env = {**_env(), **variables, STORE_VAR: self.address, NOTICE_VAR: str(self.notice_path(name))}
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
        for process in [*self.ranks, self.store]:
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


@dataclass
class Loss:
    """What the launcher did about a lost rank: the survivors by name, the ranks that joined, when."""

    survivors: dict[str, subprocess.Popen[bytes]]
    joiners: list[subprocess.Popen[bytes]]
    lost_at: float
    identical: bool


def _lose(world: World, size: int, victim: int, how: signal.Signals | None, spare: str) -> Loss:
    """Start ``size`` ranks (and a waiting spare if ``spare`` is "warm"), send ``how`` to ``victim``
    once the first survivor finished FAIL_AFTER_STEP steps (``None``: the victim raises in the step
    after, and the launcher acts at its exit), and do what the launcher will: decide the next world,
    tell each survivor its place, and hand the lost place to the waiting spare, to a process
    started into generation 1 ("cold"), or to nobody ("none": the world shrinks)."""
    raising = {"RAISE_AT_STEP": str(FAIL_AFTER_STEP + 1)} if how is None else {}
    ranks = [world.start(rank, size, 0, f"rank{rank}", **(raising if rank == victim else {})) for rank in range(size)]
    waiting = world.start_spare("spare") if spare == "warm" else None
    watched = f"rank{min(set(range(size)) - {victim})}"
    wait_for(lambda: len(world.progress(watched)) >= FAIL_AFTER_STEP, f"{watched}'s first steps", START_S)
    if how is None:
        assert 1 == ranks[victim].wait(START_S), world.log(f"rank{victim}")
        assert "ValueError: a bug of this rank's own" in world.log(f"rank{victim}")
    else:
        os.kill(ranks[victim].pid, how)
    lost_at = time.time()
    reform = next_world(0, size, {victim}, spares=0 if spare == "none" else 1, min_world_size=size - 1)
    assert isinstance(reform, Reform)
    told, handed = notices(reform, world.address)
    for old, notice in told.items():
        write_notice(str(world.notice_path(f"rank{old}")), notice)
    joiners = []
    for place in handed:
        if waiting is not None:
            write_notice(str(world.notice_path("spare")), place)
            joiners.append(waiting)
        else:
            joiners.append(world.start(place.rank, place.world_size, place.generation, "spare"))
    survivors = {f"rank{old}": ranks[old] for old, _ in reform.survivors}
    return Loss(survivors, joiners, lost_at, reform.identical)


def _assert_survived_in_place(world: World, loss: Loss, uninterrupted: Path) -> None:
    """Every survivor kept its process and, with every joiner, redid the same steps from the last
    committed one; a world that kept its shape ends bit-identical to a run with no failure."""
    names = [*loss.survivors, *(["spare"] if loss.joiners else [])]
    codes = world.finish(*loss.survivors.values(), *loss.joiners)
    assert [0] * len(codes) == codes, "".join(world.log(name) for name in names)
    redone: dict[str, list[int]] = {}
    for name, process in loss.survivors.items():
        steps = world.progress(name)
        assert {process.pid} == {pid for _, _, pid, _ in steps}, f"{name} kept its process"
        assert {0, 1} == {generation for _, generation, _, _ in steps}
        redone[name] = [step for step, generation, _, _ in steps if generation == 1]
    if loss.joiners:
        redone["spare"] = [step for step, _, _, _ in world.progress("spare")]
    first = min(steps[0] for steps in redone.values())
    assert {name: list(range(first, STEPS + 1)) for name in redone} == redone, "all took up the same step"
    assert first <= FAIL_AFTER_STEP + 2
    if loss.identical:
        assert [] == differing_tensors(uninterrupted, world.directory / "final.pt")
    first_again = min(at for name in loss.survivors for _, generation, _, at in world.progress(name) if generation == 1)
    print(f"loss of a rank -> a survivor's first step of generation 1: {first_again - loss.lost_at:.3f}s")


@pytest.mark.parametrize("victim", [1, 0])
def test_survivors_keep_their_process_through_a_peers_sigkill_and_a_warm_spare_ends_it_bit_identical(
    world: World, uninterrupted: Path, victim: int
) -> None:
    """A rank SIGKILLed mid-run (rank 0 too: the store is not its): the survivor leaves the broken
    all-reduce and joins generation 1 on the launcher's store with a spare that had waited, script
    started, for a place; the spare receives the last step committed in the survivor's memory,
    both redo the step in flight, and the final weights (dropout and Adam included) match a run
    with no failure to the bit."""
    _assert_survived_in_place(world, _lose(world, 2, victim, signal.SIGKILL, "warm"), uninterrupted)


def test_a_survivor_leaves_an_all_reduce_hung_on_a_stopped_peer_when_the_launcher_says_so(
    world: World, uninterrupted: Path
) -> None:
    """Rank 1 SIGSTOPped (its sockets stay open, gloo would wait out its 120 s timeout): the notice
    alone makes rank 0 shut its group's sockets and re-form with a rank started into generation 1,
    and the result is still bit-identical."""
    _assert_survived_in_place(world, _lose(world, 2, 1, signal.SIGSTOP, "cold"), uninterrupted)


def test_a_rank_whose_step_raises_exits_at_once_and_the_survivor_goes_on_with_a_spare(
    world: World, uninterrupted: Path
) -> None:
    """Rank 1's own ValueError is no generation's end: it propagates and the rank exits 1; rank 0,
    whose all-reduce broke, waits for the launcher's word and re-forms with a spare, bit-identical."""
    _assert_survived_in_place(world, _lose(world, 2, 1, None, "warm"), uninterrupted)


def test_without_a_spare_the_survivors_go_on_renumbered_in_a_smaller_world(world: World, uninterrupted: Path) -> None:
    """Rank 1 of 3 SIGKILLed with no spare: ranks 0 and 2 re-form as ranks 0 and 1 of a world of 2,
    each in its own process, from the last committed step (the result differs: the world did)."""
    _assert_survived_in_place(world, _lose(world, 3, 1, signal.SIGKILL, "none"), uninterrupted)


def test_a_join_waiting_for_a_rank_that_never_comes_is_left_when_the_launcher_moves_on(world: World) -> None:
    """Generation 1's replacement never arrives (a second loss while the world re-forms): the
    survivor, blocked joining it, leaves it at the launcher's next word and goes on alone in
    generation 2, still in its own process."""
    survivor, victim = world.start(0, 2, 0, "rank0"), world.start(1, 2, 0, "rank1")
    wait_for(lambda: len(world.progress("rank0")) >= FAIL_AFTER_STEP, "rank 0's first steps", START_S)
    os.kill(victim.pid, signal.SIGKILL)
    first = next_world(0, 2, {1}, spares=1, min_world_size=1)
    assert isinstance(first, Reform)
    write_notice(str(world.notice_path("rank0")), notices(first, world.address)[0][0])
    time.sleep(2.0)  # the survivor waits in generation 1's join for a rank 1 that is never started
    second = next_world(1, 2, {1}, spares=0, min_world_size=1)
    assert Reform(2, 1, ((0, 0),), ()) == second
    write_notice(str(world.notice_path("rank0")), notices(second, world.address)[0][0])
    assert [0] == world.finish(survivor), world.log("rank0")
    steps = world.progress("rank0")
    assert {survivor.pid} == {pid for _, _, pid, _ in steps}
    assert {0, 2} == {generation for _, generation, _, _ in steps}
    assert STEPS == steps[-1][0]
