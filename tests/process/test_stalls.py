"""Steps read from the ranks' output, and stalls, for real: no code in the training script."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from harness import Finished, Launcher, scrape, script, status_text, wait_for

from elastic.node.probes.stacks import PY_SPY_MISSING, find_py_spy
from elastic.node.watchers.steps import LineSplitter, latest_write



def _failures(finished: Finished) -> list[dict[str, Any]]:
    return [e for e in finished.events("worker_failed") if e["kind"] != "collateral"]


@pytest.mark.parametrize(
    ("flags", "words"),
    [(["--stall-floor", 2], "--stall-timeout auto allows"), (["--stall-timeout", 1.5], "--stall-timeout 1.5 allows 1.5 s")],
    ids=["auto", "fixed"],
)
def test_a_rank_that_stalls_while_printing_is_hung_dumped_killed_and_restarted(
    launcher: Launcher, flags: list[object], words: str
) -> None:
    """Rank 1 stops stepping but keeps printing NCCL warnings and an evaluation bar: stalled."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--max-restarts", 1, *flags,
        command=script("prints_steps.py", "plain", "stalls"),
    )

    assert 0 == finished.returncode, finished.explain()
    [stalled] = _failures(finished)
    assert ("hung", 1, 0, "SIGKILL") == (stalled["kind"], stalled["rank"], stalled["attempt"], stalled["signal"])
    assert stalled["message"].startswith("stalled: no new step for "), stalled["message"]
    assert "(last step 20)" in stalled["message"] and words in stalled["message"]
    assert any("NCCL WARN" in line for line in stalled["log_tail"])  # output went on to the end
    assert "failures" == finished.events("restart_scheduled")[0]["budget"]
    dump = (finished.run_dir / "attempt-0" / "stacks" / "rank-1.txt").read_text()
    if find_py_spy() is None:
        assert PY_SPY_MISSING in dump
    else:
        assert "stuck_in_allreduce" in dump, dump

    firsts = {e["attempt"]: e for e in finished.events("first_step_seen")}
    assert {0, 1} == set(firsts)
    assert "output" == firsts[1]["source"]
    reached = [e for e in finished.events("step_reached") if e["attempt"] == 0]
    assert reached and reached[-1]["rank"] == 0 and reached[-1]["step"] > 20  # rank 0 stepped on
    report = finished.report()["attempts"]
    assert 20 == report[1]["step_reached"]["step"]
    assert report[1]["first_step"]["step"] >= 1 and report[1]["first_step_s"] > 0
    assert "attempt 1: first step" in status_text(finished.run_dir)


@pytest.mark.parametrize("checkpoint_dir", [True, False], ids=["into-checkpoint-dir", "elsewhere"])
def test_a_slow_save_into_the_checkpoint_dir_is_no_stall(launcher: Launcher, tmp_path: Path, checkpoint_dir: bool) -> None:
    """Steps of 0.05 s and a floor of 2 s: a 6 s save (60× the K-window's steps) trips the
    window unless it writes into --checkpoint-dir, whose activity holds the window open."""
    saves = tmp_path / "ckpt"
    options: list[object] = ["--nproc-per-node", 1, "--stall-floor", 2]
    if checkpoint_dir:
        options += ["--checkpoint-dir", saves]
    finished = launcher.run(*options, command=script("prints_steps.py", "plain", "saves", saves / "step-20", 6))

    if checkpoint_dir:
        assert 0 == finished.returncode, finished.explain()
        assert [] == _failures(finished)
        assert 40 == finished.report()["attempts"][0]["step_reached"]["step"]
    else:
        assert 0 != finished.returncode
        [stalled] = _failures(finished)
        assert "stalled: no new step" in stalled["message"] and "(last step 20)" in stalled["message"]


def _listed_first(parent: Path, names: list[str]) -> str:
    """Of ``names``, one that the listing of ``parent`` gives before its other entries, where the
    file system lists by a hash of the name (ext4): a walk in listing order reaches it last.
    The first name where none is (a file system that lists in creation order)."""
    for name in names:
        (parent / name).mkdir()
        try:
            with os.scandir(parent) as entries:
                first = next(entries).name
        finally:
            (parent / name).rmdir()
        if first == name:
            return name
    return names[0]


def test_a_slow_save_beside_thousands_of_kept_shards_is_no_stall(launcher: Launcher, tmp_path: Path) -> None:
    """Five kept checkpoints of 1,024 shards (more entries than the walk looks at) and a 6 s save
    into a new step directory while the rank prints nothing: the save holds the window open."""
    saves = tmp_path / "ckpt"
    for kept in range(100, 600, 100):
        (saves / f"step_{kept}").mkdir(parents=True)
        for shard in range(1024):
            (saves / f"step_{kept}" / f"shard-{shard:05d}.safetensors").touch()
    saving = saves / _listed_first(saves, [f"step_{step}" for step in range(600, 2600, 100)])
    finished = launcher.run("--nproc-per-node", 1, "--stall-floor", 2, "--checkpoint-dir", saves,
                            command=script("prints_steps.py", "plain", "saves", saving, 6))
    assert 0 == finished.returncode, finished.explain()
    assert [] == _failures(finished)
    assert 40 == finished.report()["attempts"][0]["step_reached"]["step"]


def test_a_pause_of_ten_steps_is_within_the_auto_window(launcher: Launcher) -> None:
    """Steps of 0.05 s, a floor far below them: a 0.5 s pause without output (10 steps' time;
    an evaluation pass that prints nothing) is inside K × the p95 step time (at least 1 s: the
    K rule alone keeps it from being a stall)."""
    finished = launcher.run(
        "--nproc-per-node", 1, "--stall-floor", 0.01,
        command=script("prints_steps.py", "plain", "pauses", 0.5),
    )
    assert 0 == finished.returncode, finished.explain()
    assert [] == _failures(finished)


@pytest.mark.parametrize(
    ("fmt", "options", "last"),
    [
        ("hf", [], 30),  # a tqdm bar redrawn with \r, never a newline until the end
        ("lightning", [], 30),  # Epoch 2: ... 10/10 -> 2 × 10 + 10
        ("custom", ["--progress-pattern", r"it=(\d+) done"], 30),
    ],
)
def test_framework_bars_and_a_custom_pattern_are_read(
    launcher: Launcher, fmt: str, options: list[str], last: int
) -> None:
    finished = launcher.run("--nproc-per-node", 1, *options, command=script("prints_steps.py", fmt, "steps", 30))
    assert 0 == finished.returncode, finished.explain()
    [first] = finished.events("first_step_seen")
    assert ("output", 0) == (first["source"], first["rank"])
    assert last == finished.report()["attempts"][0]["step_reached"]["step"]


def test_an_evaluation_bar_does_not_freeze_the_training_step(launcher: Launcher) -> None:
    """The Hugging Face Trainer's evaluation bar (300 batches, at step 5 of 120) is another
    counter than its training bar: steps 6 to 120 are progress, no stall is called, and the
    training step is the step reached."""
    finished = launcher.run("--nproc-per-node", 1, "--stall-floor", 3,
                            command=script("hf_trainer_bars.py", 120, 5, 300))
    assert 0 == finished.returncode, finished.explain()
    assert [] == _failures(finished)
    assert 120 == finished.report()["attempts"][0]["step_reached"]["step"]


def test_a_pattern_that_captures_no_number_reads_no_step_and_breaks_nothing(launcher: Launcher) -> None:
    """``(\\S+) done`` matches ``it=12 done`` but captures ``it=12``: no step, and the node's
    watch and the drain go on as without a pattern."""
    finished = launcher.run("--nproc-per-node", 1, "--progress-pattern", r"(\S+) done",
                            command=script("prints_steps.py", "custom", "steps", 10))
    assert 0 == finished.returncode, finished.explain()
    assert [] == finished.events("first_step_seen")
    assert "Traceback" not in finished.stderr and "internal error" not in finished.stderr, finished.stderr


def test_heartbeat_steps_win_over_the_output(launcher: Launcher) -> None:
    """The rank prints 10× the step it reports by elastic.heartbeat(step=...): the heartbeat's counts."""
    finished = launcher.run("--nproc-per-node", 1, command=script("prints_steps.py", "both", "steps", 30))
    assert 0 == finished.returncode, finished.explain()
    reached = finished.report()["attempts"][0]["step_reached"]
    assert 0 < reached["step"] <= 30, reached


def test_a_bar_redrawn_without_newlines_is_read_redraw_by_redraw() -> None:
    """Bytes split anywhere: whole lines, then whole redraws before the last \r; the rest waits."""
    splitter = LineSplitter()
    assert [] == splitter.feed(b"step 1")
    assert ["step 12", ""] == splitter.feed(b"2\n")
    assert ["\r 1%|| 10/1000 [\r 2%|| 20/1000 [\r"] == splitter.feed(b"\r 1%|| 10/1000 [\r 2%|| 20/1000 [\r 3%|| 3")
    assert " 3%|| 3" == splitter.rest()


def test_the_latest_write_under_the_checkpoint_dir_is_found_levels_down(tmp_path: Path) -> None:
    deep = tmp_path / "step-20" / "model"
    deep.mkdir(parents=True)
    shard = deep / "shard-0.bin"
    shard.write_bytes(b"x")
    os.utime(tmp_path, (1000.0, 1000.0))
    os.utime(tmp_path / "step-20", (1000.0, 1000.0))
    os.utime(deep, (1000.0, 1000.0))
    os.utime(shard, (5000.0, 5000.0))
    assert 5000.0 == latest_write(str(tmp_path))
    assert latest_write(str(tmp_path / "missing")) is None


def test_progress_pattern_none_reads_no_steps(launcher: Launcher) -> None:
    finished = launcher.run("--nproc-per-node", 1, "--progress-pattern", "none",
                            command=script("prints_steps.py", "plain", "steps", 5))
    assert 0 == finished.returncode, finished.explain()
    assert [] == finished.events("first_step_seen")


def test_a_bad_progress_pattern_is_refused_before_launch(launcher: Launcher) -> None:
    finished = launcher.run("--progress-pattern", "step (\\d+", command=script("prints_steps.py", "plain", "steps", 5))
    assert 2 == finished.returncode
    [line] = [x for x in finished.stderr.splitlines() if "--progress-pattern" in x]
    assert "is not a regular expression" in line
    assert not (finished.run_dir / "attempt-0").exists()


def test_the_metrics_show_each_ranks_step_while_it_runs(launcher: Launcher) -> None:
    """elastic_step{rank} follows the steps read from the output (at the nodes' report cadence)."""
    pytest.importorskip("prometheus_client.parser")
    process = launcher.start("--metrics-port", 0, "--nproc-per-node", 2, "--stall-timeout", "none",
                             command=script("prints_steps.py", "plain", "stalls"))
    port = launcher.wait_for_event("metrics_serving")["port"]

    def both_stepping() -> dict[int, float] | None:
        samples = scrape(port)
        steps = {int(dict(labels)["rank"]): value for (name, labels), value in samples.items() if name == "elastic_step"}
        return steps if steps.get(0, 0) > 20 and steps.get(1) == 20 else None

    try:
        steps = wait_for(both_stepping, "rank 0 past step 20, rank 1 stuck at 20")
    finally:
        process.terminate()
        launcher.finished(process)
    assert 20 == steps[1]
