"""The keeper's socket: named by its pid and start time, one request and one answer, same user only."""

from __future__ import annotations

import os
import threading
import uuid

from elastic.node.spawner import keeper_socket


def test_a_keeper_s_address_is_abstract_and_short_whatever_the_run_directory() -> None:
    """No file, no 107-byte path limit to meet: the name holds the pid and the start time only."""
    name = keeper_socket.address(4_194_304, 123_456_789_012)
    assert name.startswith("\0") and len(name.encode()) < 60


def test_a_process_s_start_time_and_boot_are_read_from_the_kernel() -> None:
    assert keeper_socket.start_ticks(os.getpid()) > 0 and len(keeper_socket.boot_id()) == 36
    assert 0 == keeper_socket.start_ticks(2**22 + 17)  # no such process


def test_a_request_gets_its_answer_from_a_listener_of_the_same_user() -> None:
    name = f"\0elastic-keeper-test-{uuid.uuid4().hex}"
    server = keeper_socket.listen(name)
    server.setblocking(True)

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(5.0)
            request = keeper_socket.receive(conn)
            keeper_socket.send(conn, {"t": "echo", "same_user": keeper_socket.same_user(conn), "asked": request})

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        assert {"t": "echo", "same_user": True, "asked": {"t": "hello"}} == keeper_socket.ask(name, {"t": "hello"})
    finally:
        thread.join(10)
        server.close()


def test_an_answer_from_another_process_than_the_one_expected_is_not_taken() -> None:
    """One that took the keeper's name first is not the keeper, whatever it says."""
    name = f"\0elastic-keeper-test-{uuid.uuid4().hex}"
    server = keeper_socket.listen(name)
    try:
        assert keeper_socket.ask(name, {"t": "hello"}, timeout_s=1.0, pid=os.getpid() + 1) is None
    finally:
        server.close()


def test_nobody_listening_is_no_answer() -> None:
    assert keeper_socket.ask(f"\0elastic-keeper-test-{uuid.uuid4().hex}", {"t": "hello"}, timeout_s=1.0) is None
