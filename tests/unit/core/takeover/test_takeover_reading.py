"""A takeover believes a keeper only on proof, and reads its account into what the controller hears."""

from __future__ import annotations

import signal

import pytest

from elastic.core.takeover.reading import (
    Account,
    Identity,
    KeptExit,
    KeptRank,
    prove,
    read_account,
)

BOOT = "8a1f0c3e-boot"
RECORDED = Identity(pid=4242, started=987654, boot=BOOT, run_id="run-7", generation=1)


def test_the_keeper_the_record_names_is_believed_when_it_is_that_very_process() -> None:
    assert prove(RECORDED, RECORDED, run_id="run-7", generation=2) is None


@pytest.mark.parametrize(("found", "why"), [
    (None, "is gone or does not answer"),
    (Identity(4242, 111, BOOT, "run-7", 1), "another process now"),
    (Identity(4242, 987654, "other-boot", "run-7", 1), "another boot"),
    (Identity(4242, 987654, BOOT, "run-8", 1), "keeps run 'run-8'"),
    (Identity(4242, 987654, BOOT, "run-7", 2), "already serves a driver of generation 2"),
])
def test_a_keeper_is_refused_when_anything_of_its_identity_differs(found: Identity | None, why: str) -> None:
    """A pid owned by another process now, another boot, another run, or a driver as new: refused."""
    refusal = prove(RECORDED, found, run_id="run-7", generation=2)
    assert refusal is not None and why in refusal


def test_a_record_without_a_boot_id_is_never_believed() -> None:
    """Without the boot's id a pid and a start time may name anything after a reboot."""
    bootless = Identity(4242, 987654, "", "run-7", 1)
    assert "another boot" in (prove(bootless, bootless, run_id="run-7", generation=2) or "")


ACCOUNT = Account(node="n1", ranks=(KeptRank(3, 0, 100), KeptRank(3, 1, 101), KeptRank(2, 0, 90)))


def test_every_rank_alive_is_adopted_as_it_runs() -> None:
    """No exit while no driver read: the attempt goes on, nothing restarts."""
    takeover = read_account(ACCOUNT, 3, {0: 100, 1: 101})
    assert (True, (0, 1), ()) == (takeover.adopted, tuple(r.rank for r in takeover.alive), takeover.exited)


def test_a_rank_that_exited_meanwhile_is_adopted_with_its_exit() -> None:
    exited = KeptExit(101, -int(signal.SIGKILL), at=1_000.0)
    takeover = read_account(Account("n1", ACCOUNT.ranks, (exited,)), 3, {0: 100, 1: 101})
    assert (True, (0,), ((1, exited),)) == (
        takeover.adopted, tuple(r.rank for r in takeover.alive), tuple((r.rank, e) for r, e in takeover.exited))


@pytest.mark.parametrize("planned", [{0: 100, 1: 999}, {0: 100, 1: 101, 2: 102}])
def test_a_rank_the_keeper_cannot_account_for_refuses_the_adoption(planned: dict[int, int]) -> None:
    """Another pid than the journal's, or a rank it never started: no partial takeover."""
    takeover = read_account(ACCOUNT, 3, planned)
    assert not takeover.adopted and "does not account for rank" in (takeover.refused or "")
