"""A rank's traceback under the launcher reads as it does without it: no frame of elastic's in it."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from harness import BIN, REPO, Launcher, launcher_env, script

torch = pytest.importorskip("torch")
ELASTIC = f"{REPO / 'elastic'}/"  # a frame of the launcher's package (torch has a package named elastic too)
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="needs torch without a GPU (the CPU wheel)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _traceback(text: str) -> list[str]:
    """The last traceback in ``text``: from its first line to the exception's, as printed."""
    lines = text.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    return lines[start:end + 1]


@pytest.mark.parametrize("case, status", [("nccl", 1), ("bad-backend", 1), ("caught", 3)],
                         ids=["uncaught", "unknown-backend", "print_exc"])
def test_a_failing_init_process_group_shows_the_traceback_it_shows_without_the_launcher(
    launcher: Launcher, case: str, status: int
) -> None:
    """init_process_group raises in the rank (uncaught, or printed by the script's own
    traceback.print_exc()): its log holds the same traceback, frame for frame, as the same script
    run by plain python with the rank's variables, and no file of elastic's."""
    finished = launcher.run("--max-restarts", 0, command=script("asks_for_cuda.py", case))
    plain = subprocess.run(
        [sys.executable, str(BIN / "asks_for_cuda.py"), case], capture_output=True, text=True, timeout=60,
        env=launcher_env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                         MASTER_PORT=str(_free_port())),
    )

    assert status == finished.returncode, finished.explain()
    assert status == plain.returncode, plain.stderr
    under_elastic = _traceback(finished.rank_log(0, 0))
    assert not [line for line in under_elastic if ELASTIC in line], under_elastic
    assert _traceback(plain.stderr) == under_elastic
    marks = [line for line in (launcher.run_dir / "attempt-0" / "rank-0.startup").read_text().splitlines()
             if '"init_' in line]
    assert 2 == len(marks)  # init_begin and init_end, written though it raised


def test_the_traceback_torch_s_record_writes_has_no_elastic_frame(launcher: Launcher) -> None:
    """init_process_group raises under torch's @record: the error file's traceback, which the summary
    quotes, goes from the script's call to torch's frames."""
    finished = launcher.run("--max-restarts", 0, command=script("asks_for_cuda.py", "recorded"))

    assert 1 == finished.returncode, finished.explain()
    traceback = finished.report()["root_cause"]["traceback"]
    assert "init_process_group" in traceback and ELASTIC not in traceback, traceback
