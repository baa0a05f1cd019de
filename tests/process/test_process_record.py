"""The record of an embedded Ray's processes, and stopping what it names: by pid, only while each pid
is still the process recorded (its start time), never another that took the pid over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from harness import is_alive, wait_for

from elastic.node.process_record import (
    RecordedProcess,
    identify,
    process_tree,
    read_record,
    stop_recorded,
    write_record,
)

SLEEPER = [sys.executable, "-c", "import subprocess, sys, time; "
           "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process with a child of its own, both sleeping; both killed by pid at the end."""
    process = subprocess.Popen(SLEEPER)
    wait_for(lambda: len(process_tree(process.pid)) == 2, "the sleeper's child")
    yield process
    for recorded in process_tree(process.pid)[::-1]:  # by pid: only what this fixture started
        os.kill(recorded.pid, signal.SIGKILL)
    process.wait(10)


def test_a_tree_is_recorded_with_start_times_and_read_back(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    """The record holds each process of the tree with its start time; read back, the same."""
    tree = process_tree(sleeper.pid)
    record = tmp_path / "embedded-ray.json"
    write_record(record, {"address": "127.0.0.1:1"}, tree)

    assert [sleeper.pid] == [p.pid for p in tree[:1]]
    assert identify(sleeper.pid) == tree[0]
    assert ({"address": "127.0.0.1:1"}, tree) == read_record(record)
    assert 0o600 == record.stat().st_mode & 0o777


def test_stopping_a_record_kills_every_process_still_the_one_recorded(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """Each recorded process that is still alive is SIGKILLed by pid, and said stopped."""
    tree = process_tree(sleeper.pid)
    record = tmp_path / "embedded-ray.json"
    write_record(record, {}, tree)

    stopped = stop_recorded(record)

    assert tree == list(stopped)
    assert -9 == sleeper.wait(10)
    wait_for(lambda: not any(is_alive(p.pid) for p in tree), "the recorded processes gone")


def test_a_pid_whose_process_is_not_the_one_recorded_is_left_alone(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """A recorded pid now held by a process that started at another time (a reused pid) is not
    signalled; nor is a pid that no process holds, nor an unreadable record."""
    [me, child] = process_tree(sleeper.pid)
    record = tmp_path / "embedded-ray.json"
    write_record(record, {}, [RecordedProcess(me.pid, me.started + 1, me.name),
                              RecordedProcess(child.pid, child.started - 1, child.name),
                              RecordedProcess(2**22 + 1, 0, "gone")])

    assert () == stop_recorded(record)
    assert is_alive(me.pid) and is_alive(child.pid)
    record.write_text('{"processes": [{"pid": ')
    assert () == stop_recorded(record)
    assert () == stop_recorded(tmp_path / "none.json")


def test_each_process_is_recorded_with_the_boot_it_ran_in(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    """Pid and start ticks name a process for one boot only: the record keeps the boot's id too."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    tree = process_tree(sleeper.pid)
    record = tmp_path / "embedded-ray.json"
    write_record(record, {}, tree)

    assert [boot, boot] == [p.boot for p in tree]
    assert [boot, boot] == [p["boot"] for p in json.loads(record.read_text())["processes"]]
    assert tree == read_record(record)[1]


def test_a_process_recorded_in_another_boot_is_left_alone_even_with_its_pid_and_start_ticks(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """After a reboot, or read on another machine (a requeued job's new node), pid and ticks may name
    a live process by chance: under another boot id it is not the one recorded and is not killed."""
    [me, child] = process_tree(sleeper.pid)
    record = tmp_path / "embedded-ray.json"
    other = "00000000-0000-4000-8000-000000000000"
    write_record(record, {}, [replace(me, boot=other), replace(child, boot=other)])

    assert () == stop_recorded(record)
    assert is_alive(me.pid) and is_alive(child.pid)


def test_a_record_written_before_boot_ids_were_kept_is_still_read_and_stopped(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """An older driver's record has no ``boot``: judged by pid and start time alone, as it was."""
    tree = process_tree(sleeper.pid)
    record = tmp_path / "embedded-ray.json"
    record.write_text(json.dumps({"fields": {}, "processes": [
        {"pid": p.pid, "started": p.started, "name": p.name} for p in tree
    ]}))

    stopped = stop_recorded(record)

    assert [(p.pid, p.started, "") for p in tree] == [(p.pid, p.started, p.boot) for p in stopped]
    assert -9 == sleeper.wait(10)
