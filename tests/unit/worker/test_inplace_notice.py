"""The launcher's word that a generation is over, as a rank reads it; and the thread that listens for it."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from elastic.worker.inplace.notice import GENERATION_VAR, STORE_VAR, Notice, first_notice, read_notice, write_notice
from elastic.worker.inplace.sockets import shut_down, socket_inodes
from elastic.worker.inplace.watch import NoticeWatch


def test_a_notice_written_is_read_back_whole(tmp_path: Path) -> None:
    path = str(tmp_path / "notice")
    write_notice(path, Notice(3, 1, 2, "127.0.0.1:29400"))
    assert Notice(3, 1, 2, "127.0.0.1:29400") == read_notice(path)
    assert [Path(path)] == list(tmp_path.iterdir())  # no temporary file left behind


def test_no_notice_or_a_torn_one_reads_as_none(tmp_path: Path) -> None:
    assert read_notice(str(tmp_path / "absent")) is None
    (tmp_path / "torn").write_text('{"generation": 1, "rank"')
    assert read_notice(str(tmp_path / "torn")) is None


@pytest.mark.parametrize(("generation", "rank", "world", "store"), [(-1, 0, 1, "h:1"), (0, 2, 2, "h:1"), (0, 0, 1, "h")])
def test_a_place_outside_the_world_or_a_store_without_port_is_refused(
    generation: int, rank: int, world: int, store: str
) -> None:
    with pytest.raises(ValueError):
        Notice(generation, rank, world, store)


def test_the_first_generation_comes_from_the_rank_variables_and_only_under_the_launcher() -> None:
    env = {STORE_VAR: "node0:29400", "RANK": "1", "WORLD_SIZE": "2"}
    assert Notice(0, 1, 2, "node0:29400") == first_notice(env)
    assert Notice(4, 1, 2, "node0:29400") == first_notice({**env, GENERATION_VAR: "4"})
    assert first_notice({"RANK": "1", "WORLD_SIZE": "2"}) is None
    with pytest.raises(ValueError, match=STORE_VAR):
        first_notice({STORE_VAR: "node0:29400"})


def test_the_watch_ends_a_generation_only_for_a_newer_one_and_calls_back_once(tmp_path: Path) -> None:
    path = str(tmp_path / "notice")
    write_notice(path, Notice(2, 0, 2, "h:1"))  # the notice that started this generation
    called = []
    watch = NoticeWatch(path, 2, called.append, interval_s=0.001).start()
    try:
        assert watch.over() is None
        write_notice(path, Notice(3, 0, 1, "h:1"))
        assert Notice(3, 0, 1, "h:1") == watch.wait(5.0)
        assert [Notice(3, 0, 1, "h:1")] == called
    finally:
        watch.stop()


def test_a_watch_without_a_notice_file_never_ends_a_generation() -> None:
    watch = NoticeWatch(None, 0, lambda _: None).start()
    assert watch.wait(0.01) is None
    watch.stop()


def test_shutting_down_a_groups_sockets_wakes_a_thread_blocked_on_them_and_spares_the_others() -> None:
    """A recv blocked on a socket opened by the 'group' returns at once; a socket opened before it stays up."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        spared = socket.create_connection(("127.0.0.1", port))
        spared_peer, _ = server.accept()
        before = set(socket_inodes())
        group = socket.create_connection(("127.0.0.1", port))
        group_peer, _ = server.accept()
        inodes = set(socket_inodes()) - before
        received: list[bytes] = []
        reader = threading.Thread(target=lambda: received.append(group.recv(1)))
        reader.start()
        try:
            assert 0 < shut_down(inodes)
            reader.join(5.0)
            assert [b""] == received
            spared_peer.sendall(b"x")
            assert b"x" == spared.recv(1)
        finally:
            for sock in (spared, spared_peer, group, group_peer):
                sock.close()
