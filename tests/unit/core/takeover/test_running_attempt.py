"""Only an attempt that was simply running when its driver died may be adopted with its ranks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from elastic.core.journal.recovery import prior_run
from elastic.core.takeover.running import RunningAttempt, not_the_same_job

AT = "2026-12-02T10:00:{:02d}+00:00".format


def _running(*after: dict[str, Any], pids: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """A journal whose attempt 0 (2 ranks, resumed from step 40) entered running, its ranks'
    pids journaled, then ``after``; its driver dead after that."""
    return [
        {"event": "run_started", "run_id": "r", "pid": 41, "time": AT(0)},
        {"event": "attempt_started", "attempt": 0, "world_size": 2, "nodes": ["n"], "resume_step": 40,
         "master_port": 29500, "time": AT(1)},
        {"event": "phase_changed", "attempt": 0, "dest": "launching", "time": AT(2)},
        {"event": "rank_pids", "attempt": 0, "pids": {"0": 100, "1": 101} if pids is None else pids, "time": AT(3)},
        {"event": "phase_changed", "attempt": 0, "dest": "running", "time": AT(4)},
        *({**event, "attempt": 0, "time": AT(5 + i)} for i, event in enumerate(after)),
    ]


def test_an_attempt_its_driver_left_running_is_taken_over_as_journaled() -> None:
    """With how it was planned, when it was launched, and what of its start the journal holds."""
    running = prior_run(_running(
        {"event": "sign_of_life_seen", "rank": 1, "node": "n", "source": "output"},
        {"event": "first_step_seen", "rank": 1, "step": 41, "source": "output"},
        {"event": "step_reached", "step": 60, "rank": 0},
    )).running
    assert RunningAttempt(
        attempt=0, world_size=2, nodes=("n",), resume_step=40, pids={0: 100, 1: 101},
        launched_at=datetime.fromisoformat(AT(4)).timestamp(), first_step=(1, 41), sign_of_life=True,
    ) == running
    assert running is not None and 29500 == running.plan["master_port"]
    quiet = prior_run(_running()).running
    assert quiet is not None and (None, False) == (quiet.first_step, quiet.sign_of_life)


@pytest.mark.parametrize("began_to_end", [
    {"event": "worker_exited", "rank": 1, "exit_code": 0},
    {"event": "worker_failed", "kind": "signal", "rank": 1, "node": "n", "exit_code": None, "signal": "SIGKILL"},
    {"event": "exit_timer_started", "deadline_s": 30},
    {"event": "preemption_noticed", "source": "signal SIGUSR1", "then": "requeue"},
    {"event": "phase_changed", "dest": "draining", "reason": "stop requested"},
], ids=["a rank exited 0", "a rank failed", "an exit timer", "a notice", "a drain"])
def test_an_attempt_that_had_begun_to_end_is_not_taken_over(began_to_end: dict[str, Any]) -> None:
    """Its dead driver had begun to decide, and not all of that is journaled: it ends with it."""
    assert None is prior_run(_running(began_to_end)).running


def test_an_attempt_not_yet_running_or_without_every_pid_is_not_taken_over() -> None:
    assert None is prior_run(_running()[:3]).running  # launching: its ranks may not all have started
    untimed = [{k: v for k, v in event.items() if k != "time"} for event in _running()]
    assert None is prior_run(untimed).running  # when it was launched is not known
    assert None is prior_run(_running(pids={"0": 100})).running
    finished = _running({"event": "workers_stopped", "checkpoint_step": 60})
    assert None is prior_run(finished).running  # ended under its own driver


def test_a_rerun_that_asks_for_another_command_or_world_is_not_the_job_its_ranks_run() -> None:
    """Adopting would go on with what the rerun asked to change: another command, ranks a node or nodes."""
    started = {"command": ["python", "train.py", "--lr", "0.1"], "nproc_per_node": 2, "nnodes": "1:1", "pid": 41}
    assert None is not_the_same_job(started, {"command": ["python", "train.py", "--lr", "0.1"],
                                              "nproc_per_node": 2, "nnodes": "1:1"})
    changed = not_the_same_job(started, {"command": ["python", "train.py", "--lr", "0.2"], "nproc_per_node": 2,
                                         "nnodes": "1:1"})
    assert changed is not None and changed.startswith("the rerun's command")
    assert "--nproc-per-node" in (not_the_same_job(started, {**started, "nproc_per_node": 4}) or "")
