"""A spawner's books: what it tells a driver that takes it over of the ranks it started."""

from __future__ import annotations

from elastic.node.spawner.books import KeptBooks

STARTED = {"argv": ["python", "train.py"], "env": {"RANK": "0"}, "cwd": None, "log_path": "/run/attempt-0/rank-0.log"}


def test_an_end_while_a_driver_reads_the_reports_is_crossed_out_and_one_after_the_loss_is_kept() -> None:
    books = KeptBooks()
    for pid, rank in ((100, 0), (101, 1), (102, 2)):
        books.started(pid, 3, rank, STARTED)
    books.ended(102, 0)  # reported to the live driver
    assert not books.kept
    books.lost(ranks=2)
    books.ended(101, -9)
    account = books.account(after=0)
    assert [[3, 0, 100], [3, 1, 101]] == account["ranks"]
    assert [101] == [pid for pid, _, _ in account["exits"]] and -9 == account["exits"][0][1]
    assert ["lost", "exit"] == [kind for _, kind, _, _ in account["events"]]


def test_a_takeover_gets_the_ranks_alive_and_ended_with_how_each_started_then_the_ended_are_forgotten() -> None:
    books = KeptBooks()
    books.started(100, 3, 0, STARTED)
    books.started(101, 3, 1, STARTED)
    books.lost(ranks=2)
    books.ended(101, 1)
    answer = books.handed_over({100}, generation=2)
    assert ("resumed", 2) == (answer["t"], answer["generation"])
    assert [[3, 0, 100], [3, 1, 101]] == answer["ranks"] and [101] == [e[0] for e in answer["exits"]]
    assert {"attempt": 3, "rank": 0, **STARTED} == answer["commands"][100]
    assert not books.kept  # ends go to the new driver's reports again
    assert [[3, 0, 100]] == books.account(after=0)["ranks"] and [] == books.account(after=0)["exits"]
