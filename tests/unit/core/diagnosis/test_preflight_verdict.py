"""``--preflight``: a node whose check fails is excluded before launch; too few left fails the run."""

from __future__ import annotations

import signal

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.diagnosis.preflight import NodeCommandResult, judge_preflight
from elastic.core.events import EventName
from elastic.core.exit_codes import ExitCode
from elastic.core.messages import (
    AttemptPlanned, FinishRun, LaunchAttempt, Outcome, PlanAttempt, PreflightRan, RunStarted, WorkersStopped,
)
from elastic.core.policy.restarts import RestartPolicy


def _passed(node: str) -> NodeCommandResult:
    return NodeCommandResult(node, exit_code=0, output=("ok",))


def _failed(node: str, code: int = 3, output: tuple[str, ...] = ("no GPU found",)) -> NodeCommandResult:
    return NodeCommandResult(node, exit_code=code, output=output)


def test_every_node_passing_excludes_none() -> None:
    """All exit 0: nothing excluded, the attempt goes on as planned."""
    verdict = judge_preflight([_passed("n0"), _passed("n1")], timeout_s=60, available=2, min_nodes=2)
    assert ((), True, None) == (verdict.excluded, verdict.goes_on, verdict.message)


def test_a_failing_node_is_excluded_with_its_last_line_and_the_run_goes_on_with_enough_left() -> None:
    """n1 exits 3: excluded, reason naming the preflight and its output; two nodes still meet MIN 2."""
    verdict = judge_preflight([_passed("n0"), _failed("n1"), _passed("n2")], timeout_s=60, available=3,
                              min_nodes=2)
    assert (("n1", "--preflight failed (exit code 3): no GPU found"),) == verdict.excluded
    assert verdict.goes_on


def test_too_few_nodes_left_fails_in_one_line_naming_the_preflight_and_the_output() -> None:
    """One node, and its check fails: the run cannot go on, and says why in one line."""
    verdict = judge_preflight([_failed("vm", output=("checking", "", "no GPU found", ""))], timeout_s=60,
                              available=1, min_nodes=1)
    assert not verdict.goes_on
    assert ("--preflight failed on node vm (exit code 3): no GPU found; 0 usable nodes left, "
            "--nnodes needs at least 1") == verdict.message


def test_a_spare_node_counts_toward_what_is_left() -> None:
    """--nnodes 3 on three planned nodes and a fourth idle: n2's failure leaves three."""
    results = [_passed("n0"), _passed("n1"), _failed("n2")]
    assert judge_preflight(results, timeout_s=60, available=4, min_nodes=3).goes_on
    assert not judge_preflight(results, timeout_s=60, available=3, min_nodes=3).goes_on


def test_a_timeout_a_signal_and_a_command_that_could_not_run_all_fail() -> None:
    """Not only a non-zero exit: each way of not passing excludes the node, said as it was."""
    results = [
        NodeCommandResult("a", timed_out=True, output=("slow",)),
        NodeCommandResult("b", signal=int(signal.SIGKILL)),
        NodeCommandResult("c", error="No such file or directory: nvidia-smi"),
    ]
    verdict = judge_preflight(results, timeout_s=5, available=10, min_nodes=1)
    assert [
        ("a", "--preflight failed (timed out after 5s, --preflight-timeout): slow"),
        ("b", "--preflight failed (killed by SIGKILL): no output"),
        ("c", "--preflight failed (could not run: No such file or directory: nvidia-smi): no output"),
    ] == list(verdict.excluded)


def _controller(min_nodes: int, left_out: tuple[str, ...] = ()) -> Controller:
    c = Controller(RestartPolicy.create(max_restarts=3),
                   ControllerSettings(grace_s=5.0, min_nodes=min_nodes, left_out=left_out))
    c.handle(RunStarted(0.0))
    return c


def _ran(results: list[NodeCommandResult], available: int, at: float = 1.0) -> PreflightRan:
    planned = AttemptPlanned(0, len(results), at, nodes=len(results), plan={"nodes": [r.node for r in results]})
    return PreflightRan(0, tuple(results), available, 60.0, planned, at + 0.5)


def test_the_controller_launches_when_every_node_passed_and_journals_the_results() -> None:
    c = _controller(min_nodes=2)
    decision = c.handle(_ran([_passed("n0"), _passed("n1")], available=2))
    [ran] = [r for r in decision.records if r.event is EventName.PREFLIGHT_RAN]
    assert ran.fields["passed"] is True and ["n0", "n1"] == [r["node"] for r in ran.fields["results"]]  # type: ignore[union-attr,index]
    assert (LaunchAttempt(0),) == decision.commands


def test_the_controller_plans_the_attempt_again_without_the_failed_node() -> None:
    """n1 failed: journaled as excluded with its output, and the same attempt is planned without it."""
    c = _controller(min_nodes=2, left_out=("n9",))
    decision = c.handle(_ran([_passed("n0"), _failed("n1"), _passed("n2")], available=3))
    [excluded] = [r for r in decision.records if r.event is EventName.NODE_EXCLUDED]
    assert ("n1", ["no GPU found"]) == (excluded.fields["node"], excluded.fields["output"])
    assert (PlanAttempt(0, 0.0, ("n9", "n1")),) == decision.commands
    assert [] == [r for r in decision.records if r.event is EventName.ATTEMPT_STARTED]  # nothing launched


def test_the_controller_fails_the_run_before_launch_when_too_few_nodes_pass() -> None:
    c = _controller(min_nodes=1)
    decision = c.handle(_ran([_failed("vm")], available=1))
    assert not any(isinstance(command, LaunchAttempt) for command in decision.commands)
    finished = c.handle(WorkersStopped(0, 2.0))
    [finish] = [command for command in finished.commands if isinstance(command, FinishRun)]
    assert (Outcome.FAILED, int(ExitCode.NODES_UNAVAILABLE)) == (finish.outcome, finish.exit_status)
    assert finish.reason.startswith("--preflight failed on node vm (exit code 3): no GPU found")
