"""Node health as judged from failures: evidence tied to the node, within a window, spares counted."""

from __future__ import annotations

import signal

from elastic.core.diagnosis.nodes import SUSPICION_WINDOW_S, NodeVerdict, judge_node
from elastic.core.diagnosis.signatures import Diagnosis, FailureClass
from elastic.core.failures import Failure, FailureKind

ECC = Diagnosis("ecc-error", FailureClass.NODE, "RuntimeError: CUDA error: uncorrectable ECC error encountered")
NAN = Diagnosis("nan-loss", FailureClass.TRANSIENT, "loss is nan")
CUDA = Diagnosis("cuda-error", FailureClass.TRANSIENT, "CUDA error: an illegal memory access was encountered")
IMPORT = Diagnosis("import-error", FailureClass.DETERMINISTIC, "ModuleNotFoundError: No module named 'x'")
HOUR = 3600.0


def failed(attempt: int, rank: int, node: str, at: float, diagnosis: Diagnosis | None = None,
           *, signum: int | None = None) -> Failure:
    kind = FailureKind.CRASHED if signum is not None else FailureKind.EXITED
    return Failure(kind, attempt, rank, node, at, exit_code=None if signum else 1, signal=signum,
                   diagnosis=diagnosis)


def judge(cause: Failure, *earlier: Failure, nodes: int = 2, available: int | None = 3, min_nodes: int = 2,
          identical: bool = False, left_out: tuple[str, ...] = ()) -> NodeVerdict | None:
    return judge_node(cause, earlier, identical=identical, left_out=left_out, nodes=nodes, available=available,
                      min_nodes=min_nodes)


def test_the_window_is_two_hours() -> None:
    assert 2 * HOUR == SUSPICION_WINDOW_S


def test_a_node_class_failure_is_excluded_when_an_idle_node_of_the_cluster_can_take_its_ranks() -> None:
    """--nnodes 2 on a cluster of three: the attempt used two, the third idles; it takes n1's place."""
    verdict = judge(failed(0, 1, "n1", 10.0, ECC), nodes=2, available=3, min_nodes=2)
    assert verdict is not None and verdict.excluded and "n1" == verdict.node
    assert verdict.reason.startswith("ecc-error: the node is at fault")


def test_a_node_class_failure_is_kept_when_no_other_usable_node_is_there() -> None:
    verdict = judge(failed(0, 1, "n1", 10.0, ECC), nodes=2, available=2, min_nodes=2)
    assert verdict is not None and not verdict.excluded
    assert verdict.reason.endswith("kept: without node n1 1 usable node would be left, --nnodes needs at least 2")


def test_the_cluster_unknown_counts_the_attempt_s_nodes() -> None:
    assert judge(failed(0, 1, "n1", 10.0, ECC), nodes=3, available=None).excluded  # type: ignore[union-attr]
    assert not judge(failed(0, 1, "n1", 10.0, ECC), nodes=2, available=None).excluded  # type: ignore[union-attr]


def test_nodes_already_left_out_are_not_counted_twice() -> None:
    """Four nodes, n3 out already: the backend's count (3) has none of it; without n1, two are left."""
    verdict = judge(failed(1, 1, "n1", 10.0, ECC), nodes=3, available=3, min_nodes=2, left_out=("n3",))
    assert verdict is not None and verdict.excluded


def test_the_same_failure_on_two_different_ranks_of_one_node_suspects_the_node() -> None:
    """Ranks 2 and 3 both run on n1; a CUDA illegal access on each, 20 minutes apart."""
    verdict = judge(failed(1, 3, "n1", 1300.0, CUDA), failed(0, 2, "n1", 100.0, CUDA))
    assert verdict is not None and verdict.excluded
    assert "the same failure (cuda-error) on ranks 2 and 3 of it, 20 min apart" == verdict.reason


def test_the_same_sigsegv_twice_on_one_node_suspects_the_node() -> None:
    """A SIGSEGV on rank 1 of n1, again at a later step (not identical, which needs the same step)."""
    verdict = judge(failed(2, 1, "n1", 1000.0, signum=signal.SIGSEGV),
                    failed(0, 1, "n1", 400.0, signum=signal.SIGSEGV))
    assert verdict is not None and verdict.excluded
    assert "the same failure (SIGSEGV) on it again, attempts 0 and 2, 10 min apart" == verdict.reason


def test_a_repeat_on_the_node_within_the_window_suspects_it() -> None:
    verdict = judge(failed(1, 0, "n0", HOUR + 60, NAN), failed(0, 0, "n0", 60.0, NAN))
    assert verdict is not None and verdict.excluded and "n0" == verdict.node


def test_a_repeat_outside_the_window_does_not() -> None:
    assert judge(failed(1, 0, "n0", SUSPICION_WINDOW_S + 61, NAN), failed(0, 0, "n0", 60.0, NAN)) is None


def test_two_unrelated_transient_failures_of_rank_0_hours_apart_do_not_suspect_its_node() -> None:
    """A W&B network error (exit 1, no signature), three hours later a NaN: rank 0's extra work, not n0."""
    assert judge(failed(1, 0, "n0", 3 * HOUR, NAN), failed(0, 0, "n0", 60.0)) is None


def test_two_unrelated_failures_of_one_rank_within_the_window_do_not_either() -> None:
    assert judge(failed(1, 0, "n0", 600.0, NAN), failed(0, 0, "n0", 60.0, CUDA)) is None


def test_an_exit_status_alone_twice_is_not_the_same_failure() -> None:
    """Two tracebacks nothing matched both exit 1: that says too little to blame the node."""
    assert judge(failed(1, 0, "n0", 600.0), failed(0, 0, "n0", 60.0)) is None


def test_the_same_failure_on_another_node_is_no_evidence_against_this_one() -> None:
    assert judge(failed(1, 1, "n1", 600.0, CUDA), failed(0, 0, "n0", 60.0, CUDA)) is None


def test_a_deterministic_failure_never_suspects_the_node() -> None:
    assert judge(failed(1, 1, "n1", 600.0, IMPORT), failed(0, 2, "n1", 60.0, IMPORT), identical=True) is None


def test_the_same_failure_twice_in_a_row_suspects_the_node_before_the_code() -> None:
    verdict = judge(failed(1, 1, "n1", 600.0), failed(0, 1, "n1", 60.0), identical=True)
    assert verdict is not None and verdict.excluded
    assert verdict.reason.startswith("the same failure twice in a row on it")


def test_a_node_already_left_out_is_not_judged_again() -> None:
    assert judge(failed(0, 1, "n1", 10.0, ECC), left_out=("n1",)) is None


def test_a_run_on_one_node_is_never_told_its_node_is_suspect() -> None:
    assert judge(failed(1, 0, "n0", 600.0, signum=signal.SIGSEGV), failed(0, 0, "n0", 60.0, signum=signal.SIGSEGV),
                 nodes=1, available=1, min_nodes=1) is None
