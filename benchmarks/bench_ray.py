"""Benchmark elastic's Ray backend: restart, detection, launch latency vs torchrun; node loss.

Three parts, each on its own ``ray.cluster_utils.Cluster`` on loopback (or no
cluster at all), all in one run:

- ``restart``: 2 nodes × 2 ranks joined with ``--address``, interleaved with
  torchrun running 4 ranks on one node; one rank SIGKILLs itself.
- ``embedded``: 4 ranks with no address, so elastic starts (and stops) Ray
  itself: launch latency with Ray's own start-up.
- ``node-loss``: ``--nnodes 2:3`` on 3 worker nodes; ``Cluster.remove_node``
  takes one away while attempt 0 runs, gracefully or by SIGKILL, with Ray's
  default health checks and with fast ones.

It reuses ``bench_launchers.py``'s schedule, measurements and process sweeps;
see ``benchmarks/README.md`` for what each metric spans.

    python benchmarks/bench_ray.py --repeat 5
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from bench_launchers import (
    METRICS,
    POLL_S,
    PROCESS_GONE,
    REPO_ROOT,
    RESULTS_DIR,
    SETTLE_S,
    SWEEP_TIMEOUT_S,
    Event,
    RepetitionError,
    Sample,
    Settings,
    all_started,
    child_pids,
    elastic_argv,
    exit_on_sigterm,
    format_cell,
    format_ratio,
    is_available,
    launcher_argv,
    launcher_env,
    measure,
    package_version,
    read_events,
    run_dir,
    run_launcher,
    select,
    summarize,
    wait_for_events,
)

PARTS = ("restart", "embedded", "node-loss")
HEALTH_CHECKS: dict[str, dict[str, int]] = {
    "default": {},  # what users get
    "fast": {"health_check_period_ms": 200, "health_check_failure_threshold": 3},  # the tests'
}
REMOVALS = {"graceful": True, "sigkill": False}  # remove_node's allow_graceful
OBJECT_STORE_BYTES = 80 * 1024 * 1024
GPUS_PER_NODE = 2  # fake GPUs per worker node: elastic places ranks on GPU nodes only
NPROC_PER_NODE = 2
WORLD_SIZE = 4  # every restart scenario, torchrun's included: 4 ranks
NODE_LOSS_NODES = 3  # worker nodes in the node-loss part, and ranks 2 per node
SCENARIOS = ("torchrun", "ray-cluster", "ray-embedded")
RATIOS = (("ray-cluster", "torchrun"), ("ray-embedded", "torchrun"))
# The recovery's steps as elastic journals them: (label, source, dest, attempt).
STEPS = (
    ("draining_s", "running", "draining", 0),
    ("pending_s", "draining", "pending", 0),
    ("launching_s", "pending", "launching", 1),
    ("running_s", "launching", "running", 1),
)
BREAKDOWN = {
    "draining_s": "driver starts draining",
    "pending_s": "drain over",
    "launching_s": "attempt 1 planned",
    "running_s": "agents' launch calls returned",
    "started_s": "last rank started",
}
NODE_LOSS_METRICS = {"launch_s": "launch latency (s)", "recover_s": "recovery (s)"}
CLUSTER_WAIT_S = 60.0
PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class NodeLossSample:
    """What one node-loss repetition measured; None where it could not be measured."""

    removal: str
    health: str
    rep: int
    launch_s: float | None = None
    recover_s: float | None = None
    cause: str | None = None
    world_sizes: tuple[int, ...] | None = None
    exit_code: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class Breakdown:
    """Seconds from the failure (the kill, or remove_node) to each step of the recovery."""

    group: str
    name: str
    draining_s: float | None = None
    pending_s: float | None = None
    launching_s: float | None = None
    running_s: float | None = None
    started_s: float | None = None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated")
    parser.add_argument("--health-checks", default="default,fast", help="for node-loss")
    parser.add_argument("--removals", default="graceful,sigkill", help="for node-loss")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of each scenario")
    parser.add_argument("--cpu-window", type=float, default=3.0, help="seconds of CPU sampling")
    parser.add_argument("--step-time", type=float, default=0.5, help="seconds per workload step")
    parser.add_argument("--timeout", type=float, default=60.0, help="bound on each wait")
    args = parser.parse_args(argv)
    choices = {"parts": PARTS, "health_checks": HEALTH_CHECKS, "removals": REMOVALS}
    for flag, allowed in choices.items():
        values = getattr(args, flag).split(",")
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            name = "--" + flag.replace("_", "-")
            parser.error(f"{name}: unknown {unknown}; allowed: {', '.join(allowed)}")
        setattr(args, flag, values)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


# -- processes ---------------------------------------------------------------------------


def adopt_orphans() -> None:
    """Adopt the orphans of what we start (a SIGKILLed raylet's workers), so the sweep sees them."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the final sweep sees fewer processes


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``."""
    found, todo = [], [pid]
    while todo:
        try:
            children = child_pids(todo.pop())
        except PROCESS_GONE:
            continue
        found += children
        todo += children
    return found


def reap_zombies() -> None:
    """Collect the exit status of every child that has ended."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_descendants() -> list[int]:
    """SIGKILL, by pid, every process this one started that is still alive; return survivors."""
    deadline_at = time.monotonic() + SWEEP_TIMEOUT_S
    while True:
        reap_zombies()
        alive = [pid for pid in descendants(os.getpid()) if not is_zombie(pid)]
        if not alive or time.monotonic() >= deadline_at:
            return alive
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(POLL_S)


def is_zombie(pid: int) -> bool:
    """Whether the process has ended and waits to be reaped (or is gone already)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


# -- the Ray cluster ---------------------------------------------------------------------


class BenchCluster:
    """``ray.cluster_utils.Cluster`` on loopback: a CPU-only head, workers with 2 fake GPUs each."""

    def __init__(self, workers: int, system_config: dict[str, int]) -> None:
        from ray.cluster_utils import Cluster  # Ray only where a part needs it

        head_args: dict[str, Any] = {
            "num_cpus": 1,
            "object_store_memory": OBJECT_STORE_BYTES,
            "include_dashboard": False,
        }
        if system_config:
            head_args["_system_config"] = system_config
        self.workers = workers
        self.cluster = Cluster(initialize_head=True, head_node_args=head_args)
        head = self.cluster.head_node
        self.session_dir = str(head.get_session_dir_path())  # type: ignore[attr-defined]
        try:
            self.restore()
        except BaseException:
            self.shutdown()
            raise

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def restore(self) -> None:
        """Add worker nodes until there are as many as asked for, and wait for Ray to see them."""
        while len(self.cluster.worker_nodes) < self.workers:
            self.cluster.add_node(
                num_cpus=1, num_gpus=GPUS_PER_NODE, object_store_memory=OBJECT_STORE_BYTES
            )
        self.cluster.wait_for_nodes(timeout=CLUSTER_WAIT_S)

    def remove(self, node_id: str, graceful: bool) -> float:
        """Remove the worker node with that id; return the wall-clock time just before."""
        node = next((n for n in self.cluster.worker_nodes if n.node_id == node_id), None)
        if node is None:
            raise RepetitionError(f"node {node_id} is not a worker node of the cluster")
        removed_t = time.time()
        self.cluster.remove_node(node, allow_graceful=graceful)
        return removed_t

    def shutdown(self) -> None:
        """Stop every node and remove the session's files."""
        self.cluster.shutdown()  # type: ignore[no-untyped-call]
        shutil.rmtree(self.session_dir, ignore_errors=True)


@contextmanager
def ray_cluster(workers: int, system_config: dict[str, int]) -> Iterator[BenchCluster]:
    """A cluster for the length of a part, shut down on every exit path."""
    cluster = BenchCluster(workers, system_config)
    try:
        yield cluster
    finally:
        cluster.shutdown()


def local_cluster_file() -> Path:
    """Where a head node started on this machine records its address (elastic joins it)."""
    from elastic.backends.ray.cluster.address import local_cluster_file as where

    return where()


def no_local_cluster(timeout_s: float) -> bool:
    """Wait until no Ray head runs here (else elastic joins it); False if one stays."""
    deadline_at = time.monotonic() + timeout_s
    while local_cluster_file().exists():
        if time.monotonic() >= deadline_at:
            return False
        time.sleep(POLL_S * 10)
    return True


# -- elastic's journal -------------------------------------------------------------------


def read_journal(work_dir: Path, name: str) -> list[dict[str, Any]]:
    """The journal of the repetition's run; empty if it has none."""
    try:
        lines = (run_dir(work_dir, name) / "journal.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def journal_time(record: dict[str, Any]) -> float:
    """A journal record's wall-clock time, in seconds since the epoch."""
    return datetime.fromisoformat(record["time"]).timestamp()


def phase_time(journal: list[dict[str, Any]], source: str, dest: str, attempt: int) -> float | None:
    """When the attempt first went from ``source`` to ``dest``; None if it never did."""
    for record in journal:
        if (record["event"], record.get("attempt")) == ("phase_changed", attempt) and (
            record.get("source"),
            record.get("dest"),
        ) == (source, dest):
            return journal_time(record)
    return None


def breakdown(
    group: str, name: str, work_dir: Path, failed_t: float, events: list[Event]
) -> Breakdown:
    """Time each step of the recovery from ``failed_t``, from the journal and the ranks' events."""
    journal = read_journal(work_dir, name)
    steps = {label: phase_time(journal, src, dst, attempt) for label, src, dst, attempt in STEPS}
    started = [e["t"] for e in select(events, "started", 1)]
    marks = steps | {"started_s": max(started) if started else None}
    since = {k: None if t is None else t - failed_t for k, t in marks.items()}
    return Breakdown(group, name, **since)


def first_cause(journal: list[dict[str, Any]]) -> str | None:
    """The kind of attempt 0's root cause: its last non-collateral failure once the launcher
    revised the cause (a node found lost after the peers it broke), else its first."""
    failures = [
        r for r in journal
        if r["event"] == "worker_failed" and r.get("attempt") == 0 and r.get("kind") != "collateral"
    ]
    if not failures:
        return None
    revised = any(r["event"] == "root_cause_revised" and r.get("attempt") == 0 for r in journal)
    return str((failures[-1] if revised else failures[0]).get("kind"))


def world_sizes(journal: list[dict[str, Any]]) -> tuple[int, ...]:
    """The world size of each attempt started."""
    return tuple(r["world_size"] for r in journal if r["event"] == "attempt_started")


# -- restart, launch and detection --------------------------------------------------------


def scenario_env(settings: Settings, events_path: Path) -> dict[str, str]:
    """The launcher's environment, with no Ray address: each scenario names its own cluster."""
    env = launcher_env(settings, events_path)
    env.pop("RAY_ADDRESS", None)
    return env


def scenario_argv(scenario: str, work_dir: Path, name: str, address: str | None) -> list[str]:
    """The command line of one restart scenario: 4 ranks, one restart allowed."""
    if scenario == "torchrun":
        return launcher_argv("torchrun", WORLD_SIZE, work_dir, name)
    if scenario == "ray-embedded":
        return elastic_argv(WORLD_SIZE, work_dir, name, "--backend", "ray")
    assert address is not None
    nnodes = str(WORLD_SIZE // NPROC_PER_NODE)
    options = ("--backend", "ray", "--address", address, "--nnodes", nnodes)
    return elastic_argv(NPROC_PER_NODE, work_dir, name, *options)


def run_scenario(
    scenario: str, rep: int, settings: Settings, work_dir: Path, address: str | None = None
) -> tuple[Sample, Breakdown | None]:
    """One kill-and-restart repetition, and for elastic its recovery step by step."""
    name = f"{scenario}-r{rep}"
    events_path = work_dir / f"{name}.events.jsonl"
    base = Sample(scenario, WORLD_SIZE, rep)
    if scenario == "ray-embedded" and not no_local_cluster(settings.timeout_s):
        error = f"{local_cluster_file()} stayed: elastic would join that cluster, not embed Ray"
        return replace(base, error=error), None
    sample = run_launcher(
        base,
        scenario_argv(scenario, work_dir, name, address),
        scenario_env(settings, events_path),
        work_dir / f"{name}.log",
        lambda proc, popen_t: measure(base, proc, events_path, popen_t, settings),
    )
    events = read_events(events_path)
    killed = select(events, "killed", 0)
    if scenario == "torchrun" or not killed:
        return sample, None
    return sample, breakdown(scenario, name, work_dir, killed[0]["t"], events)


# -- node loss ---------------------------------------------------------------------------


def node_loss_group(sample: NodeLossSample) -> str:
    """The group a node-loss sample belongs to: "removal/health checks"."""
    return f"{sample.removal}/{sample.health}"


def last_node(work_dir: Path, name: str) -> str:
    """The node of attempt 0 holding the highest ranks (never rank 0's, the barrier's host)."""
    for record in read_journal(work_dir, name):
        if record["event"] == "attempt_started" and record["attempt"] == 0:
            return str(record["nodes"][-1])
    raise RepetitionError("attempt 0 is running but its journal has no attempt_started")


def follow_node_loss(
    base: NodeLossSample,
    proc: subprocess.Popen[bytes],
    popen_t: float,
    cluster: BenchCluster,
    settings: Settings,
    work_dir: Path,
    name: str,
) -> tuple[NodeLossSample, Breakdown]:
    """Let attempt 0 start, remove one of its nodes, time attempt 1 starting on the survivors."""
    events_path = work_dir / f"{name}.events.jsonl"
    world = NODE_LOSS_NODES * NPROC_PER_NODE
    survivors = world - NPROC_PER_NODE
    events = wait_for_events(events_path, all_started(world, 0), proc, settings.timeout_s)
    launch_s = max(e["t"] for e in select(events, "started", 0)) - popen_t
    time.sleep(SETTLE_S)
    removed_t = cluster.remove(last_node(work_dir, name), REMOVALS[base.removal])
    events = wait_for_events(events_path, all_started(survivors, 1), proc, settings.timeout_s)
    recover_s = max(e["t"] for e in select(events, "started", 1)) - removed_t
    try:
        exit_code = proc.wait(timeout=settings.steps * settings.step_time_s + settings.timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise RepetitionError("launcher did not exit after the restarted attempt") from exc
    journal = read_journal(work_dir, name)
    sample = replace(
        base,
        launch_s=launch_s,
        recover_s=recover_s,
        cause=first_cause(journal),
        world_sizes=world_sizes(journal),
        exit_code=exit_code,
    )
    group = f"node-loss {node_loss_group(base)}"
    return sample, breakdown(group, name, work_dir, removed_t, events)


def run_node_loss(
    cluster: BenchCluster, removal: str, health: str, rep: int, settings: Settings, work_dir: Path
) -> tuple[NodeLossSample, Breakdown | None]:
    """One node-loss repetition; the cluster has all its worker nodes again afterwards."""
    name = f"node-loss-{removal}-{health}-r{rep}"
    events_path = work_dir / f"{name}.events.jsonl"
    env = scenario_env(settings, events_path)
    del env["BENCH_KILL_AFTER"]  # no rank kills itself: the node goes
    options = ("--backend", "ray", "--address", cluster.address, "--nnodes", f"2:{NODE_LOSS_NODES}")
    base = NodeLossSample(removal, health, rep)
    found: list[Breakdown] = []

    def follow(proc: subprocess.Popen[bytes], popen_t: float) -> NodeLossSample:
        sample, steps = follow_node_loss(base, proc, popen_t, cluster, settings, work_dir, name)
        found.append(steps)
        return sample

    try:
        argv = elastic_argv(NPROC_PER_NODE, work_dir, name, *options)
        sample = run_launcher(base, argv, env, work_dir / f"{name}.log", follow)
    finally:
        cluster.restore()
    return sample, found[0] if found else None


# -- the parts ---------------------------------------------------------------------------


@dataclass
class Results:
    """Everything measured so far."""

    samples: list[Sample]
    node_loss: list[NodeLossSample]
    breakdowns: list[Breakdown]

    def add(self, sample: Any, steps: Breakdown | None) -> None:
        """Keep a sample and its breakdown, and show the sample as it comes."""
        print(sample, file=sys.stderr, flush=True)
        (self.node_loss if isinstance(sample, NodeLossSample) else self.samples).append(sample)
        if steps is not None:
            self.breakdowns.append(steps)


def run_restart_part(
    results: Results, with_torchrun: bool, repeat: int, settings: Settings, work_dir: Path
) -> None:
    """Joined Ray cluster (2 nodes × 2 ranks) and torchrun (4 ranks), interleaved."""
    scenarios = ["torchrun", "ray-cluster"] if with_torchrun else ["ray-cluster"]
    with ray_cluster(WORLD_SIZE // NPROC_PER_NODE, HEALTH_CHECKS["default"]) as cluster:
        for rep in range(repeat):
            for scenario in scenarios:
                results.add(*run_scenario(scenario, rep, settings, work_dir, cluster.address))


def run_embedded_part(results: Results, repeat: int, settings: Settings, work_dir: Path) -> None:
    """Elastic starting its own Ray, with no cluster running here."""
    for rep in range(repeat):
        results.add(*run_scenario("ray-embedded", rep, settings, work_dir))


def run_node_loss_part(
    results: Results,
    health: str,
    removals: list[str],
    repeat: int,
    settings: Settings,
    work_dir: Path,
) -> None:
    """Node loss on one cluster with the given health checks, removal kinds interleaved."""
    with ray_cluster(NODE_LOSS_NODES, HEALTH_CHECKS[health]) as cluster:
        for rep in range(repeat):
            for removal in removals:
                results.add(*run_node_loss(cluster, removal, health, rep, settings, work_dir))


def run_all(args: argparse.Namespace, settings: Settings, work_dir: Path) -> Results:
    """Run the parts asked for, in order, and leave no process behind."""
    results = Results([], [], [])
    try:
        if "restart" in args.parts:
            with_torchrun = is_available("torchrun")
            if not with_torchrun:
                print("torchrun: not installed", file=sys.stderr)
            run_restart_part(results, with_torchrun, args.repeat, settings, work_dir)
        if "embedded" in args.parts:
            run_embedded_part(results, args.repeat, settings, work_dir)
        if "node-loss" in args.parts:
            for health in args.health_checks:
                run_node_loss_part(results, health, args.removals, args.repeat, settings, work_dir)
    finally:
        left = kill_descendants()
        if left:
            print(f"warning: processes {left} survived SIGKILL", file=sys.stderr)
    return results


# -- the report --------------------------------------------------------------------------


def format_rows(rows: list[tuple[str, ...]]) -> str:
    """Left-aligned columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)


def restart_table(summary: dict[str, dict[str, Any]]) -> str:
    """Medians of the restart scenarios side by side, with their ratios to torchrun."""
    ratios = [f"{a}/{b}" for a, b in RATIOS]
    rows: list[tuple[str, ...]] = [("metric", *SCENARIOS, *ratios)]
    for metric, label in METRICS.items():
        found = {name: summary.get(f"{name}/{WORLD_SIZE}") for name in SCENARIOS}
        stats = {name: entry[metric] if entry else None for name, entry in found.items()}
        cells = [format_cell(e[metric], e["runs"]) if e else "not run" for e in found.values()]
        quotients = [format_ratio(stats[a], stats[b]) for a, b in RATIOS]
        rows.append((label, *cells, *quotients))
    return format_rows(rows)


def node_loss_table(summary: dict[str, dict[str, Any]]) -> str:
    """Medians of the node-loss groups, one row each."""
    rows: list[tuple[str, ...]] = [("removal/health checks", *NODE_LOSS_METRICS.values())]
    for group, entry in summary.items():
        rows.append((group, *(format_cell(entry[m], entry["runs"]) for m in NODE_LOSS_METRICS)))
    return format_rows(rows)


def breakdown_table(summary: dict[str, dict[str, Any]]) -> str:
    """Medians of each recovery step, in seconds after the failure."""
    rows: list[tuple[str, ...]] = [("seconds after the failure", *BREAKDOWN.values())]
    for group, entry in summary.items():
        rows.append((group, *(format_cell(entry[m], entry["runs"]) for m in BREAKDOWN)))
    return format_rows(rows)


def summaries(results: Results) -> dict[str, dict[str, dict[str, Any]]]:
    """The medians of each table."""
    return {
        "restart": summarize(results.samples),
        "node_loss": summarize(results.node_loss, NODE_LOSS_METRICS, node_loss_group),
        "breakdown": summarize(results.breakdowns, BREAKDOWN, lambda b: b.group),
    }


def report(results: Results) -> str:
    """The tables that have rows, as printed."""
    summary = summaries(results)
    tables = (
        (restart_table, summary["restart"]),
        (node_loss_table, summary["node_loss"]),
        (breakdown_table, summary["breakdown"]),
    )
    return "\n\n".join(table(rows) for table, rows in tables if rows)


def write_results(
    args: argparse.Namespace, settings: Settings, results: Results, stamp: str, took_s: float
) -> Path:
    """Save the settings, the environment, every sample and the summaries as JSON."""
    data = {
        "created": stamp,
        "took_s": took_s,
        "python": sys.version.split()[0],
        "versions": {n: package_version(n) for n in ("elastic", "torch", "ray", "psutil")},
        "cpus": os.cpu_count(),
        "args": vars(args),
        "settings": asdict(settings)
        | {"kill_after_s": settings.kill_after_s, "steps": settings.steps},
        "health_checks": HEALTH_CHECKS,
        "samples": [asdict(s) for s in results.samples],
        "node_loss": [asdict(s) for s in results.node_loss],
        "breakdowns": [asdict(b) for b in results.breakdowns],
        "summary": summaries(results),
    }
    out = RESULTS_DIR / f"bench-ray-{stamp}.json"
    out.write_text(json.dumps(data, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the parts, print the tables, save the results."""
    args = parse_args(argv)
    exit_on_sigterm()
    adopt_orphans()
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # Ray binds 127.0.0.1 only
    # Ray's workers (elastic's node agents) import elastic: the copy beside this script.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p
    )
    settings = Settings(args.cpu_window, args.step_time, args.timeout)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work_dir = RESULTS_DIR / f"bench-ray-{stamp}"
    work_dir.mkdir(parents=True)
    started_at = time.monotonic()
    results = run_all(args, settings, work_dir)
    took_s = time.monotonic() - started_at
    print(report(results))
    print(f"took {took_s:.0f} s; results: {write_results(args, settings, results, stamp, took_s)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
