"""classify(), decode_returncode() and root_cause(): the failure table."""

from __future__ import annotations

import signal

import pytest

from elastic.core.failures import (
    Failure, FailureKind, WorkerExit, classify, decode_returncode, root_cause, to_failure,
)
from elastic.core.labels import node_label


def exit_with(returncode: int | None, *, rank: int = 0, at: float = 0.0, launch_error: str | None = None) -> WorkerExit:
    return WorkerExit(attempt=0, rank=rank, node="n0", returncode=returncode, observed_at=at,
                      launch_error=launch_error)


@pytest.mark.parametrize(
    ("returncode", "expected"),
    [
        (0, None),
        (1, FailureKind.EXITED),
        (3, FailureKind.EXITED),
        (-signal.SIGSEGV, FailureKind.CRASHED),
        (-signal.SIGBUS, FailureKind.CRASHED),
        (-signal.SIGABRT, FailureKind.CRASHED),
        (-signal.SIGILL, FailureKind.CRASHED),
        (-signal.SIGFPE, FailureKind.CRASHED),
        (-signal.SIGKILL, FailureKind.KILLED),
        (-signal.SIGTERM, FailureKind.TERMINATED),
        (-signal.SIGINT, FailureKind.TERMINATED),
        (-signal.SIGHUP, FailureKind.TERMINATED),
        (128 + signal.SIGKILL, FailureKind.KILLED),
        (128 + signal.SIGSEGV, FailureKind.CRASHED),
        (128 + signal.SIGTERM, FailureKind.TERMINATED),
        (255, FailureKind.EXITED),
    ],
)
def test_classify_sorts_exit_statuses_into_kinds(returncode: int, expected: FailureKind | None) -> None:
    """Each exit code or signal maps to the kind of DESIGN §4's table."""
    assert expected == classify(exit_with(returncode))


@pytest.mark.parametrize("returncode", [1, -signal.SIGKILL, -signal.SIGTERM, -signal.SIGSEGV])
def test_exits_after_our_stop_signal_are_collateral(returncode: int) -> None:
    """Whatever a worker dies of once we began draining is a consequence, not a cause."""
    assert FailureKind.COLLATERAL == classify(exit_with(returncode), stop_sent=True)


def test_exits_after_the_first_failure_are_collateral() -> None:
    """A rank that fails after another rank already failed is collateral."""
    assert FailureKind.COLLATERAL == classify(exit_with(7), failure_seen=True)


def test_success_after_a_failure_is_still_success() -> None:
    """Exit 0 is never a failure, whenever it happens."""
    assert classify(exit_with(0), stop_sent=True, failure_seen=True) is None


def test_launch_failure_is_never_collateral() -> None:
    """A command that cannot run is a launch failure even while draining."""
    exit = exit_with(127, launch_error="train: command not found")
    assert FailureKind.LAUNCH_FAILED == classify(exit, stop_sent=True)


@pytest.mark.parametrize(
    ("returncode", "expected"),
    [(0, (0, None)), (2, (2, None)), (-9, (None, 9)), (137, (None, 9)), (128, (128, None)),
     (200, (200, None))],
)
def test_decode_reads_shell_128_plus_n_as_signal_n(returncode: int, expected: tuple[int | None, int | None]) -> None:
    """Negative codes and 128+N from a shell wrapper are deaths by signal."""
    assert expected == decode_returncode(returncode)


def test_failure_exit_status_is_code_or_128_plus_signal() -> None:
    """A failure reports the status a shell would: its code, or 128+N."""
    killed = to_failure(exit_with(-signal.SIGKILL), FailureKind.KILLED)
    exited = to_failure(exit_with(3), FailureKind.EXITED)
    assert (137, "SIGKILL") == (killed.exit_status, killed.signal_name)
    assert 3 == exited.exit_status
    assert "rank 0 on n0 killed (SIGKILL, signal 9)" == killed.describe()


def _failure(kind: FailureKind, rank: int, at: float) -> Failure:
    return Failure(kind=kind, attempt=0, rank=rank, node="n0", observed_at=at, exit_code=1)


def test_root_cause_is_the_earliest_non_collateral_failure() -> None:
    """Collateral failures never win, however early they were seen."""
    failures = [
        _failure(FailureKind.COLLATERAL, 2, 1.0),
        _failure(FailureKind.EXITED, 1, 2.0),
        _failure(FailureKind.KILLED, 0, 3.0),
    ]
    cause = root_cause(failures)
    assert cause is not None
    assert (FailureKind.EXITED, 1) == (cause.kind, cause.rank)


def test_root_cause_ties_go_to_the_lowest_rank() -> None:
    """Two failures seen at the same instant: the lower rank is named."""
    cause = root_cause([_failure(FailureKind.EXITED, 3, 1.0), _failure(FailureKind.EXITED, 1, 1.0)])
    assert cause is not None and 1 == cause.rank


def test_no_root_cause_when_everything_was_collateral() -> None:
    """Only consequences: there is no cause to name."""
    assert root_cause([_failure(FailureKind.COLLATERAL, 0, 1.0)]) is None


RAY_NODE_ID = "09e3c45646e3d8ea4cb79a980f20e4a7e7d21ae56e82304573798acf"


@pytest.mark.parametrize(
    ("node", "label"),
    [
        (RAY_NODE_ID, "09e3c45646e3"),
        ("gpu-node-17.cluster.example.com", "gpu-node-17.cluster.example.com"),
        ("10.0.0.12", "10.0.0.12"),
    ],
)
def test_node_labels_cut_ray_ids_and_keep_host_names(node: str, label: str) -> None:
    assert node_label(node) == label


def test_a_failure_names_its_node_by_the_same_label() -> None:
    exit = WorkerExit(attempt=0, rank=1, node=RAY_NODE_ID, returncode=-signal.SIGKILL, observed_at=0.0)
    kind = classify(exit)
    assert kind is not None
    failure = to_failure(exit, kind)
    assert failure.describe() == "rank 1 on 09e3c45646e3 killed (SIGKILL, signal 9)"
