"""A hang is blamed on its cause: a rank waiting in a collective is a victim, the peer it waits for
the cause; without stacks the cause is not known. On real py-spy dumps (tests/fixtures/py_spy/)."""

from __future__ import annotations

from pathlib import Path

from elastic.core.training.hang_blame import at_work, blame_hang, waits_in_collective
from elastic.core.training.stack_frames import HangFrame, explain_hang, parse_dump

FIXTURES = Path(__file__).parents[3] / "fixtures" / "py_spy"


def frame_of(name: str) -> HangFrame:
    explained = explain_hang(parse_dump((FIXTURES / f"{name}.txt").read_text()))
    assert explained is not None
    return explained


WAITS = frame_of("gloo_allreduce.native")  # c10d::Work::wait, called from all_reduce
SLEEPS = frame_of("sleep.native")  # the script's own code
AT_EXIT = frame_of("nondaemon_thread.native")  # waiting for a non-daemon thread at exit


def test_a_rank_in_c10d_work_wait_waits_in_a_collective_and_one_asleep_in_its_code_does_not() -> None:
    assert waits_in_collective(WAITS)
    assert not waits_in_collective(SLEEPS)


def test_the_peer_a_stalled_rank_waits_for_is_the_cause() -> None:
    """Rank 0 (the one that prints steps) stalled in an all-reduce while rank 1 is in its own code:
    rank 1 is killed as hung, its reason naming what rank 0 waited in."""
    blame = blame_hang([0], {0: WAITS, 1: SLEEPS})
    assert ((1,), (0,)) == (blame.culprits, blame.victims)
    assert blame.reasons[1].startswith("rank 0 waited for it in a collective (")
    assert "while its main thread is in" in blame.reasons[1]


def test_without_a_peer_elsewhere_the_cause_is_not_known_and_no_victim_is_named_the_cause() -> None:
    """Every rank of the node waits (the cause is on another node), or a peer is at exit: the stalled
    rank is killed so the run goes on, and its reason says it was a victim."""
    for frames in ({0: WAITS, 1: WAITS}, {0: WAITS}, {0: WAITS, 1: AT_EXIT}, {0: WAITS, 1: None}):
        blame = blame_hang([0], frames)
        assert (0,) == blame.culprits
        assert "a victim; the rank it waited for is not known" in blame.reasons[0]


def test_a_stalled_rank_in_its_own_code_is_the_cause_itself() -> None:
    blame = blame_hang([1], {0: WAITS, 1: SLEEPS})
    assert ((1,), {}) == (blame.culprits, dict(blame.reasons))


def test_of_two_stalled_ranks_the_one_not_waiting_is_the_cause_and_the_one_waiting_its_victim() -> None:
    """Both silent past the timeout at one look: rank 1 stopped (its stack cannot be read) or in its
    own code, rank 0 waiting for it in the all-reduce. Only rank 1 is killed; rank 0, a victim, is
    left to survive it (in place) or to be drained with the rest."""
    for stuck in (None, SLEEPS):
        blame = blame_hang([0, 1], {0: WAITS, 1: stuck})
        assert ((1,), (0,)) == (blame.culprits, blame.victims)


def test_without_stacks_whether_it_waited_is_not_known() -> None:
    blame = blame_hang([0], {})
    assert ((0,), {0: "whether it waited for another rank is not known (no stack)"}) == (
        blame.culprits, dict(blame.reasons))


def test_a_rank_asleep_in_its_code_is_at_work_and_one_waiting_or_tearing_down_is_not() -> None:
    assert at_work(SLEEPS)
    assert not at_work(WAITS) and not at_work(AT_EXIT)
    assert not at_work(frame_of("gloo_destructor.native"))  # ~ProcessGroupGloo on the way out
