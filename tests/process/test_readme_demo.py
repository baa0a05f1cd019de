"""The demo commands of the README and docs/getting-started/one-machine.md, run as written: the toy
example survives each failure it injects."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from harness import REPO, Finished, Launcher

README = (REPO / "README.md").read_text()
ONE_MACHINE = (REPO / "docs" / "getting-started" / "one-machine.md").read_text()
TOY = REPO / "examples" / "toy_train.py"
# The only change: steps of 0.1 s instead of 0.2 s (rank 0 has to save a step before rank 1 dies).
FAST = ("--step-time", "0.1")


def readme_command(marker: str) -> tuple[list[str], list[str]]:
    """The one toy command line of the README or the one-machine page holding ``marker``:
    (launcher options, toy arguments).

    The line is cut after its last ``&&`` (the set-up before it: ``pip install``, ``rm -rf``).
    """
    [line] = [line for line in (README + ONE_MACHINE).splitlines() if "examples/toy_train.py" in line and marker in line]
    words = shlex.split(line.rsplit("&&", 1)[-1])
    dashes = words.index("--")
    assert ["python", "-m", "elastic", "run"] == words[:4], line
    assert ["python", "examples/toy_train.py"] == words[dashes + 1 : dashes + 3], line
    return words[4:dashes], words[dashes + 3 :]


def run_toy(launcher: Launcher, options: list[str], toy_args: list[str]) -> Finished:
    """The launcher with ``options`` over the toy with ``toy_args``, in the test's own directory."""
    return launcher.run(*options, command=[sys.executable, TOY, *toy_args, *FAST])


def resumed_steps(finished: Finished) -> list[int | None]:
    return [event["resume_step"] for event in finished.events("attempt_started")]


def test_the_demo_recovers_from_a_sigkilled_rank_and_resumes_from_the_checkpoint_elastic_hands_over(
    launcher: Launcher, tmp_path: Path
) -> None:
    """The first command of the README exits 0 after 2 attempts: rank 1 was SIGKILLed, both ranks
    resumed from the step_N directory rank 0 committed and the launcher passed in ELASTIC_RESUME_FROM."""
    options, toy_args = readme_command("pip install -e .")
    assert "--checkpoint-dir" in options
    finished = run_toy(launcher, options, toy_args)

    assert 0 == finished.returncode, finished.explain()
    first, second = finished.report()["attempts"]
    cause = first["root_cause"]
    assert ("killed", 1, "SIGKILL") == (cause["kind"], cause["rank"], cause["signal"])
    resumed = second["resume_step"]
    assert [None, resumed] == resumed_steps(finished)
    assert 1 <= resumed < 20, "rank 0 saved a step before rank 1 died, and was stopped before the last"
    checkpoints = tmp_path / "toy-checkpoints"
    assert (checkpoints / "step_20" / "COMMITTED").is_file()
    for rank in (0, 1):
        log = finished.rank_log(1, rank)
        assert f"rank={rank} resuming from step {resumed} ({checkpoints / f'step_{resumed}'})" in log, log
        assert f"rank={rank} done: step=20 loss=0.000133" in log, log
    # The summary's restart line, as the README's sample shows it.
    sample = next(line for line in README.splitlines() if line.startswith("  relaunch latency: "))
    shown = next(line for line in finished.stderr.splitlines() if line.startswith("  relaunch latency: "))
    def worded(line: str) -> str:  # the words, not the figures
        return re.sub(r"[0-9]+\.[0-9]+s", "Xs", line)

    assert worded(sample) == worded(shown), shown


def test_the_hang_demo_catches_the_hung_rank_with_the_heartbeat_timeout(launcher: Launcher) -> None:
    """The one-machine page's hang command: rank 1 stops beating at step 5, is called hung, and the
    rerun succeeds."""
    options, toy_args = readme_command("--heartbeat-timeout 2")
    assert "--heartbeat-timeout" in options
    finished = run_toy(launcher, options, toy_args)

    assert 0 == finished.returncode, finished.explain()
    first, second = finished.report()["attempts"]
    cause = first["root_cause"]
    assert ("hung", 1) == (cause["kind"], cause["rank"])
    assert (finished.run_dir / "attempt-0" / "stacks" / "rank-1.txt").is_file()
    assert "rank=1 done: step=20" in finished.rank_log(1, 1)


def test_a_toy_rank_that_said_it_finished_and_hangs_at_exit_costs_no_restart(launcher: Launcher) -> None:
    """The README's hang-at-exit variant: rank 1 calls elastic.heartbeat(done=True), then never exits;
    it is killed --exit-timeout after rank 0 exited 0 and the run succeeds in one attempt."""
    options, _ = readme_command("pip install -e .")
    finished = run_toy(launcher, [*options, "--exit-timeout", "2"], ["--fail-mode", "hang-at-exit"])

    assert 0 == finished.returncode, finished.explain()
    report = finished.report()
    [attempt] = report["attempts"]
    assert ("exit-hung", 1) == (attempt["root_cause"]["kind"], attempt["root_cause"]["rank"])
    assert "finished; rank 1 hung at exit and was killed, judged finished: it said so (elastic.heartbeat(done=True))" == report["reason"]
