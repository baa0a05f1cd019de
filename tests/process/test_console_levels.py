"""The console is for people, the journal for machines: what `elastic run` prints at each verbosity,
on a pipe and on a terminal, while the journal keeps every event."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from harness import REPO, Finished, Launcher, on_a_terminal, script

README = (REPO / "README.md").read_text()
TOY = REPO / "examples" / "toy_train.py"
FAIL_ONCE = script("exit_with.py", 3, "--attempt", 0)  # attempt 0 exits 3, attempt 1 exits 0


def elastic_run(launcher: Launcher, *options: object, command: list[object]) -> Finished:
    """``python -m elastic run OPTIONS -- COMMAND`` as a user types it (no ``--log-format``),
    stdout and stderr each a pipe."""
    argv = [sys.executable, "-m", "elastic", "run", "--run-dir", str(launcher.run_dir), *map(str, options),
            "--", *map(str, command)]
    return launcher.run(raw_argv=argv, command=None)


def launcher_lines(stderr: str) -> list[str]:
    """The launcher's lines on stderr before its closing summary."""
    lines = stderr.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("elastic: run ") and " after " in line)
    return lines[:end]


def readme_demo() -> tuple[list[str], list[str]]:
    """The README's demo command line: (launcher options, toy arguments)."""
    [line] = [line for line in README.splitlines() if "examples/toy_train.py" in line and "pip install -e ." in line]
    words = shlex.split(line.rsplit("&&", 1)[-1])
    dashes = words.index("--")
    return words[4:dashes], words[dashes + 3 :]


def test_the_demo_with_one_failure_prints_a_few_lines_in_words_on_a_pipe(launcher: Launcher, tmp_path: Path) -> None:
    """The README's demo (rank 1 SIGKILLed once), stderr a pipe: at most 8 launcher lines before the
    summary, in words, none JSON: the run's start (id, directory, world), the failure, the restart and
    the attempt it starts; the journal keeps every event."""
    options, toy_args = readme_demo()
    finished = elastic_run(launcher, *options, command=[sys.executable, TOY, *toy_args, "--step-time", "0.1"])

    assert 0 == finished.returncode, finished.explain()
    lines = launcher_lines(finished.stderr)
    assert len(lines) <= 8, finished.stderr
    assert [] == [line for line in lines if not line.startswith("elastic: ")], finished.stderr
    run_id = finished.events("run_started")[0]["run_id"]
    assert f"elastic: run {run_id} started: 2 ranks on this machine; run directory {launcher.run_dir}" == lines[0]
    assert any(line.endswith("attempt 0: rank 1 on " + finished.events("worker_failed")[0]["node"]
                             + " killed (SIGKILL, signal 9)") for line in lines), lines
    assert "elastic: attempt 0: restarting the ranks (2 restarts left, --max-restarts)" in lines
    resumed = finished.report()["attempts"][1]["resume_step"]
    assert any(f"attempt 1: 2 ranks on " in line and line.endswith(f"resuming from checkpoint step {resumed}")
               for line in lines), lines
    assert "phase_changed" not in finished.stderr and "{" not in finished.stderr
    assert {"phase_changed", "first_step_seen", "workers_stopped", "run_finished"} <= {
        e["event"] for e in finished.journal()
    }


def test_verbose_shows_every_journaled_event_and_json_gives_one_object_a_line(launcher: Launcher) -> None:
    """`-v --log-format json`: every event the journal holds is on stderr, one JSON object a line."""
    finished = elastic_run(launcher, "--max-restarts", 1, "-v", "--log-format", "json", command=FAIL_ONCE)

    assert 0 == finished.returncode, finished.explain()
    logged = [json.loads(line) for line in launcher_lines(finished.stderr)]
    journaled = [e["event"] for e in finished.journal()]
    assert journaled == [e["event"] for e in logged if e["event"] in journaled]


def test_verbose_in_words_shows_the_events_the_default_leaves_out(launcher: Launcher) -> None:
    """`--verbose` on the console: the phases too, as `event key=value` lines."""
    finished = elastic_run(launcher, "--max-restarts", 1, "--verbose", command=FAIL_ONCE)

    assert 0 == finished.returncode, finished.explain()
    lines = launcher_lines(finished.stderr)
    phases = [line for line in lines if line.startswith("elastic: phase_changed attempt=")]
    assert len(finished.events("phase_changed")) == len(phases), lines


def test_json_when_asked_gives_the_default_events_as_objects(launcher: Launcher) -> None:
    """`--log-format json` without `-v`: the same events the words show, as JSON lines."""
    finished = elastic_run(launcher, "--max-restarts", 1, "--log-format", "json", command=FAIL_ONCE)

    assert 0 == finished.returncode, finished.explain()
    logged = [json.loads(line) for line in launcher_lines(finished.stderr)]
    assert ["run_started", "worker_failed", "restart_scheduled", "attempt_started"] == [e["event"] for e in logged]
    assert 1 == logged[-1]["attempt"]


def test_quiet_shows_only_warnings_errors_and_the_summary(launcher: Launcher) -> None:
    """`-q`: the failure (a warning) and the summary; not the run's start, not the restart."""
    finished = elastic_run(launcher, "--max-restarts", 1, "-q", command=FAIL_ONCE)

    assert 0 == finished.returncode, finished.explain()
    assert ["elastic: attempt 0: rank 0 on " + finished.events("worker_failed")[0]["node"] + " exited (exit code 3)"] \
        == launcher_lines(finished.stderr)
    assert "  attempt 1: " in finished.stderr


def test_verbose_and_quiet_together_are_a_usage_error(launcher: Launcher) -> None:
    """One line naming both flags, exit status 2, nothing launched."""
    finished = elastic_run(launcher, "-v", "-q", command=FAIL_ONCE)

    assert 2 == finished.returncode
    assert ["elastic: error: --quiet: give --verbose (-v) or --quiet (-q), not both"] == finished.stderr.splitlines()
    assert not launcher.run_dir.exists()


def test_a_terminal_gets_the_same_words_as_a_pipe(tmp_path: Path) -> None:
    """On a pseudo-terminal: the start, the failure and the restart in words; no phases, no key=value."""
    status, screen = on_a_terminal(tmp_path, "--max-restarts", 1, "--no-status", command=FAIL_ONCE)

    assert 0 == status, screen
    lines = [line.strip("\r") for line in screen.split("\n")]
    assert any(line.startswith("elastic: run ") and " started: 1 rank on this machine; run directory " in line
               for line in lines), screen
    assert any(line.startswith("elastic: attempt 0: rank 0 on ") and line.endswith(" exited (exit code 3)")
               for line in lines), screen
    assert "elastic: attempt 0: restarting the ranks (0 restarts left, --max-restarts)" in lines, screen
    assert "phase_changed" not in screen and "event=" not in screen and "\x1b[" not in screen


def test_a_restart_without_a_checkpoint_handed_over_says_so_and_not_that_it_starts_over(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A restart elastic hands no checkpoint says why: no --checkpoint-dir, or none in it yet; never
    "from the start", which a script resuming from its own file contradicts a line later."""
    finished = elastic_run(launcher, "--max-restarts", 1, command=FAIL_ONCE)
    empty = tmp_path / "checkpoints"
    empty.mkdir()
    launcher.run_dir = tmp_path / "second"
    with_dir = elastic_run(launcher, "--max-restarts", 1, "--checkpoint-dir", empty, command=FAIL_ONCE)

    for run, said in ((finished, "no checkpoint handed over (no --checkpoint-dir)"),
                      (with_dir, "no checkpoint handed over (none in --checkpoint-dir yet)")):
        assert 0 == run.returncode, run.explain()
        lines = launcher_lines(run.stderr)
        assert [said] == [line.partition(", ")[2] for line in lines if line.startswith("elastic: attempt 1: ")], lines
        assert "from the start" not in run.stderr
