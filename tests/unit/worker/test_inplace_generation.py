"""One generation as a training loop sees it: which exceptions end it quietly, and which steps it commits."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from elastic.worker.inplace.generations import Generation, GenerationOver, InPlace
from elastic.worker.inplace.notice import NOTICE_VAR, Notice, write_notice
from elastic.worker.inplace.watch import NoticeWatch

torch = pytest.importorskip("torch")

NEXT = Notice(1, 0, 2, "127.0.0.1:29400")


def _generation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **options: Any) -> tuple[Generation, str]:
    path = str(tmp_path / "notice")
    monkeypatch.setenv(NOTICE_VAR, path)
    inplace = InPlace(torch.nn.Linear(2, 1), **options)
    watch = NoticeWatch(path, 0, lambda _: None, interval_s=0.001).start()
    return Generation(inplace, Notice(0, 0, 2, "127.0.0.1:29400"), 0, watch), path



def test_a_broken_collective_ends_the_generation_quietly_once_the_launcher_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The peer's closed socket is seen first; the notice that comes a moment later makes it the generation's end."""
    generation, path = _generation(tmp_path, monkeypatch, notice_wait_s=30.0)
    threading.Timer(0.05, write_notice, (path, NEXT)).start()
    with generation:
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer")
    assert NEXT == generation.next_notice
    assert isinstance(generation.cause, RuntimeError)


def test_an_exception_the_launcher_did_not_announce_is_the_ranks_own_and_propagates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generation, _ = _generation(tmp_path, monkeypatch, notice_wait_s=0.01)
    with pytest.raises(ValueError, match="a bug"), generation:
        raise ValueError("a bug in the step")
    with pytest.raises(RuntimeError, match="CUDA"), _generation(tmp_path, monkeypatch, notice_wait_s=0.01)[0]:
        raise RuntimeError("CUDA error: an illegal memory access")
    assert generation.next_notice is None


def test_a_keyboard_interrupt_is_never_swallowed_even_with_a_notice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    generation, path = _generation(tmp_path, monkeypatch)
    write_notice(path, NEXT)
    with pytest.raises(KeyboardInterrupt), generation:
        raise KeyboardInterrupt


def test_the_steps_stop_at_the_boundary_after_the_notice_and_end_the_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generation, path = _generation(tmp_path, monkeypatch)
    done = []
    with generation:
        for step in generation.steps(10):
            done.append(step)
            if step == 3:
                write_notice(path, NEXT)
                deadline_at = time.monotonic() + 10.0
                while generation.announced() is None and time.monotonic() < deadline_at:
                    time.sleep(0.001)
    assert ([1, 2, 3], NEXT) == (done, generation.next_notice)
    assert isinstance(generation.cause, GenerationOver)


def test_with_every_n_only_every_nth_step_and_the_last_are_committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "notice")
    monkeypatch.setenv(NOTICE_VAR, path)
    inplace = InPlace(torch.nn.Linear(2, 1), every=4)
    generation = Generation(inplace, Notice(0, 0, 2, "h:1"), 0, NoticeWatch(path, 0, lambda _: None).start())
    committed = [inplace.committed_step for _ in generation.steps(10)] + [inplace.committed_step]
    assert [None, None, None, None, 4, 4, 4, 4, 8, 8, 10] == committed
