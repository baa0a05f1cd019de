"""The end-of-run summary as a person reads it: one ledger line, each thing said once, one prefix a line."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from harness import Finished, Launcher, elastic_command, script


def _in_words(launcher: Launcher, *options: object, command: list[str]) -> Finished:
    """A run with the console a user sees (words, the default verbosity), not the tests' JSON."""
    argv = [sys.executable, "-m", "elastic", "run", "--run-dir", str(launcher.run_dir),
            *map(str, options), "--", *command]
    return launcher.run(raw_argv=argv, command=None)


def _summary(finished: Finished) -> list[str]:
    lines = finished.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("elastic: run ") and " after " in line)
    return lines[start:]


def test_a_run_s_exit_hang_is_told_once_in_its_summary_and_once_while_it_runs(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Rank 1 works on, silent, after rank 0 exited 0 (--exit-timeout 3, no restart left): the
    sentence of its hang (still running, silent) is the root cause's line alone in the summary and
    the failure's line alone on the live console; no `error:` line repeats it; `why it stopped`
    says the rest; the ledger is one line."""
    checkpoints, out = tmp_path / "ckpt", tmp_path / "out"
    checkpoints.mkdir()
    out.mkdir()
    finished = _in_words(launcher, "--nproc-per-node", 2, "--exit-timeout", 3, "--max-restarts", 0,
                         command=script("hangs_at_exit.py", checkpoints, out, 10, 0, "working"))

    assert 137 == finished.returncode, finished.explain()
    summary = _summary(finished)
    told = [line for line in finished.stderr.splitlines() if "after rank 0 exited 0 and silent for" in line]
    assert 2 == len(told), finished.stderr
    [root] = [line for line in summary if "after rank 0 exited 0 and silent for" in line]
    assert root.startswith("  root cause: rank 1 still running "), summary
    assert "main thread" in root and "stacks in " in root  # the details, said there
    [attempt] = [line for line in summary if line.startswith("  attempt 0: ")]
    assert re.search(r", rank 1 on \S+ hung at exit; not restarted$", attempt), attempt
    assert [] == [line for line in summary if line.startswith("  error: ")], summary
    assert "  why it stopped: failures budget exhausted (0 restarts in the run)" in summary, summary
    assert 1 == len([line for line in summary if line.startswith("  where the time went: ")]), summary
    assert [] == [line for line in summary if line.lstrip().startswith("and ")], summary


def test_a_rank_that_prefixes_its_own_lines_gets_no_second_prefix(launcher: Launcher) -> None:
    """torch's excepthook writes `[rank1]: ` before each line of rank 1's traceback: the console shows
    `[rank 1] Traceback ...` (the launcher's prefix standing in for torch's), the summary quotes the
    lines without it, and `elastic logs` prefixes them once; the rank's log keeps what it wrote."""
    pytest.importorskip("torch")
    finished = _in_words(launcher, "--nproc-per-node", 2, "--max-restarts", 0,
                         command=script("raises_after_init.py"))

    assert 1 == finished.returncode, finished.explain()
    assert finished.rank_log(0, 1).startswith("[rank1]: Traceback (most recent call last):")
    lines = finished.stdout.splitlines()  # ranks' lines go to stdout, the launcher's to stderr
    assert "[rank 1] Traceback (most recent call last):" in lines, finished.stdout
    assert "[rank 1] ValueError: bad batch at step 3" in lines, finished.stdout
    assert [] == [line for line in lines + finished.stderr.splitlines() if "[rank1]:" in line], finished.stdout
    summary = _summary(finished)
    assert "    | ValueError: bad batch at step 3" in summary, summary
    logs = elastic_command("logs", launcher.run_dir)
    assert 0 == logs.returncode, logs.stderr
    assert "[rank 1] ValueError: bad batch at step 3" in logs.stdout.splitlines(), logs.stdout
