"""Which launcher events the console shows at each verbosity, and how it words them."""

from __future__ import annotations

from typing import Any

import pytest

from elastic.core.labels import node_label, plural
from elastic.run.console.events import ConsoleEvents, Verbosity


def event(name: str, level: str = "info", **fields: Any) -> dict[str, Any]:
    return {"event": name, "level": level, "run_id": "r1", **fields}


@pytest.mark.parametrize(
    ("record", "quiet", "default", "verbose"),
    [
        (event("run_started"), False, True, True),
        (event("phase_changed", attempt=0), False, False, True),
        (event("worker_failed", "warning", attempt=0), True, True, True),
        (event("worker_failed", kind="collateral", attempt=0), False, False, True),
        (event("restart_scheduled", attempt=0), False, True, True),
        (event("workers_stopped", attempt=0), False, False, True),
        (event("workers_stopped", attempt=0, rerun_warning="may be trained again"), False, True, True),
        (event("teardown_failed", "warning"), True, True, True),
        (event("agent_started"), False, False, True),
        (event("node_excluded", attempt=0, node="n1", reason="ecc-error"), False, True, True),
        (event("node_kept", "warning", attempt=0, node="n1", reason="ecc-error; kept"), True, True, True),
        (event("exit_timer_started", attempt=0, rank=0), False, False, True),
        (event("ranks_awaited", attempt=0, rank=0, ranks=[1]), False, True, True),
    ],
)
def test_each_verbosity_shows_its_events(record: dict[str, Any], quiet: bool, default: bool, verbose: bool) -> None:
    """Quiet: warnings and errors; default: also what a person acts on; verbose: everything."""
    assert (quiet, default, verbose) == tuple(ConsoleEvents(v).shows(record) for v in Verbosity)


def test_the_first_attempt_is_in_the_start_line_and_later_ones_are_shown() -> None:
    """The run's first attempt_started is left out (the start line has the world); restarts' are shown."""
    console = ConsoleEvents(Verbosity.DEFAULT)
    assert [False, True] == [console.shows(event("attempt_started", attempt=a)) for a in (0, 1)]


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"resume_step": 40, "checkpoint_dir": "/ck"}, "resuming from checkpoint step 40"),
        ({"resume_step": None, "checkpoint_dir": "/ck"}, "no checkpoint handed over (none in --checkpoint-dir yet)"),
        ({"resume_step": None, "checkpoint_dir": None}, "no checkpoint handed over (no --checkpoint-dir)"),
        ({"resume_step": None}, "no checkpoint handed over"),  # an older journal's plan
    ],
)
def test_a_restart_says_which_checkpoint_was_handed_over_and_never_that_it_starts_over(
    fields: dict[str, Any], said: str
) -> None:
    """A restart's line says what elastic handed the ranks, not where the script resumes from: a
    script with a checkpoint of its own is not said to start over."""
    started = event("attempt_started", attempt=1, world_size=2, nodes=["vm"], **fields)
    assert f"elastic: attempt 1: 2 ranks on vm, {said}" == ConsoleEvents(Verbosity.DEFAULT).render(None, "info", started)


def test_waiting_for_nodes_is_said_again_only_when_the_count_changes() -> None:
    """nodes_awaited is logged at every poll; the console says it when the nodes available change."""
    console = ConsoleEvents(Verbosity.DEFAULT)
    polls = [event("nodes_awaited", needed=3, available=n) for n in (1, 1, 2, 2)]
    assert [True, False, True, False] == [console.shows(p) for p in polls]


def test_events_are_worded_and_an_event_with_no_words_is_key_values() -> None:
    console = ConsoleEvents(Verbosity.VERBOSE, run_dir="/runs/r1")
    started = event("run_started", nproc_per_node=8, nnodes="2:4", backend="ray")
    assert "elastic: run r1 started: 8 ranks per node on 2 to 4 nodes (ray); run directory /runs/r1" == \
        console.render(None, "info", started)
    assert "elastic: phase_changed attempt=0 source=pending reason='2 ranks planned'" == console.render(
        None, "info", event("phase_changed", attempt=0, source="pending", reason="2 ranks planned"))
    assert "elastic: waiting 2.4s before attempt 2 (--backoff: the last attempt saved no newer checkpoint)" == \
        console.render(None, "info", event("backoff_started", attempt=2, delay_s=2.372))


def test_a_failure_is_said_with_its_signature_and_a_node_at_fault_with_what_follows() -> None:
    """A failure's line names its signature, as the summary does; a node left out or kept says why."""
    console = ConsoleEvents(Verbosity.DEFAULT)
    diagnosis = {"signature": "disk-full", "class": "transient", "line": "OSError: [Errno 28] No space left"}
    failed = event("worker_failed", "warning", attempt=0, kind="exited", rank=0, node="vm", exit_code=1,
                   diagnosis=diagnosis)
    assert "elastic: attempt 0: rank 0 on vm exited (exit code 1) [disk-full]" == \
        console.render(None, "warning", failed)
    node = "a" * 56
    excluded = event("node_excluded", attempt=0, node=node, reason="ecc-error: the node is at fault (ECC)")
    assert (f"elastic: attempt 0: node {node_label(node)} left out of the next attempts: "
            "ecc-error: the node is at fault (ECC)") == console.render(None, "info", excluded)
    kept = event("node_kept", "warning", attempt=0, node=node, reason="ecc-error; kept: 1 usable node would be left")
    assert f"elastic: warning: attempt 0: node {node_label(node)} suspected: ecc-error; kept: 1 usable node " \
        "would be left" == console.render(None, "warning", kept)


def test_a_ray_world_with_a_rank_per_gpu_is_said_so() -> None:
    started = event("run_started", nproc_per_node=None, nnodes="2:2", backend="ray")
    assert "elastic: run r1 started: a rank per GPU (1 without GPUs) on 2 nodes (ray)" == \
        ConsoleEvents(Verbosity.DEFAULT).render(None, "info", started)


def test_a_record_missing_a_field_its_words_need_is_shown_as_key_values() -> None:
    """Words never fail a run: an odd record (an older or hand-made one) falls back to key=value."""
    console = ConsoleEvents(Verbosity.DEFAULT)
    odd = event("backoff_started", "warning", attempt=2, level_s=1)
    assert "elastic: warning: backoff_started attempt=2 level_s=1" == console.render(None, "warning", odd)


def test_plurals() -> None:
    assert ["0 restarts", "1 restart", "2 restarts"] == [plural(n, "restart") for n in (0, 1, 2)]


def test_a_wait_for_ranks_after_a_peers_exit_0_is_worded_with_who_and_how_long_at_most() -> None:
    console = ConsoleEvents(Verbosity.DEFAULT)
    said = event("ranks_awaited", attempt=0, rank=0, step=5, ranks=[1, 3], waited_s=2.0, exit_timeout_s=300.0)
    assert ("elastic: attempt 0: rank 0 exited 0 2 s ago (its last step seen: 5); waiting up to 300 s "
            "(--exit-timeout) for ranks 1, 3 to exit") == console.render(None, "info", said)
    many = event("ranks_awaited", attempt=1, rank=7, step=None, ranks=list(range(7)) + list(range(8, 64)),
                 waited_s=2.0, exit_timeout_s=2.5)
    assert ("elastic: attempt 1: rank 7 exited 0 2 s ago; waiting up to 2.5 s (--exit-timeout) for 63 ranks "
            "to exit") == console.render(None, "info", many)
