"""The record of a keeper and its ranks: written as they come and go, and never trusted past its pids' identity."""

from __future__ import annotations

import os
from pathlib import Path

from elastic.core.takeover.lease import Lease
from elastic.node.process_record import RecordedProcess, boot_id, read_record, write_record
from elastic.node.spawner.kept import KeeperRecord, KeepTerms, recorded_generation, stop_kept


def test_the_record_names_the_keeper_and_its_ranks_until_a_drain_and_nothing_once_released(tmp_path: Path) -> None:
    """This process stands for the keeper and a rank: what /proc says of it is what is recorded."""
    path = tmp_path / "keeper.json"
    record = KeeperRecord(KeepTerms(Lease(60.0, 30.0), path, "run-7", 3))
    record.keeper(os.getpid())
    record.rank(os.getpid())
    fields, processes = read_record(path)
    assert ({"lease_s": 60.0, "grace_s": 30.0, "keeper": os.getpid(), "run_id": "run-7", "generation": 3},
            [os.getpid()] * 2) == (fields, [p.pid for p in processes])
    assert processes[0].boot == boot_id() and processes[0].started > 0
    record.ranks_gone()
    assert [os.getpid()] == [p.pid for p in read_record(path)[1]]
    record.released()
    assert ({"lease_s": 60.0, "grace_s": 30.0, "keeper": None, "run_id": "run-7", "generation": 3}, []) == read_record(path)


def test_a_record_naming_a_pid_now_owned_by_another_process_stops_nothing(tmp_path: Path) -> None:
    """The pid is alive, but not with the recorded start time: refused, nothing signalled (we live on)."""
    path = tmp_path / "keeper.json"
    write_record(path, {"keeper": os.getpid(), "grace_s": 0.0},
                 [RecordedProcess(os.getpid(), started=1, name="elastic.spawner", boot=boot_id())])
    assert () == stop_kept(path, "run-7").processes


def test_no_record_stops_nothing(tmp_path: Path) -> None:
    assert () == stop_kept(tmp_path / "keeper.json", "run-7").processes


def test_a_keeper_that_does_not_answer_on_its_socket_is_not_believed(tmp_path: Path) -> None:
    """The record names this very process, which listens on no keeper socket: reached, refused."""
    from elastic.node.spawner.kept import reach_keeper

    path = tmp_path / "keeper.json"
    record = KeeperRecord(KeepTerms(Lease(60.0, 30.0), path, "run-7", 1))
    record.keeper(os.getpid())
    reached = reach_keeper(path, "run-7", 2)
    assert reached is not None and "does not answer" in (reached.refused or "")
    assert 1 == recorded_generation(path)
