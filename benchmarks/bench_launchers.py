"""Benchmark elastic against torchrun: launch, detection and restart latency, launcher CPU.

Each repetition starts one launcher with ``--max-restarts 1`` over
``workload.py``, lets it run a steady window, has one rank SIGKILL itself, and
reads the ranks' timestamped events to time the launcher's reactions. See
``benchmarks/README.md`` for what each metric means.

    python benchmarks/bench_launchers.py --launchers elastic,torchrun --nprocs 2,4 --repeat 5
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

try:
    import psutil
except ImportError:  # optional: /proc does the same on Linux
    psutil = None  # type: ignore[assignment]

PROCESS_GONE: tuple[type[Exception], ...] = (OSError,) + ((psutil.Error,) if psutil else ())

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
WORKLOAD = BENCH_DIR / "workload.py"
RESULTS_DIR = BENCH_DIR / "results"
LAUNCHERS = ("elastic", "torchrun")
PROBES = {
    "elastic": ["-m", "elastic", "run", "--help"],
    "torchrun": ["-m", "torch.distributed.run", "--help"],
}
METRICS = {
    "launch_s": "launch latency (s)",
    "detect_s": "detection latency (s)",
    "restart_s": "restart latency (s)",
    "first_step_s": "failure to first step (s)",
    "cpu_cores": "launcher CPU (cores)",
}
SETTLE_S = 0.5  # after the last rank started, before the CPU window opens
KILL_MARGIN_S = 1.0  # between the CPU window's end and the scheduled kill
TAIL_S = 2.0  # how long each attempt runs past the kill
POLL_S = 0.01
SWEEP_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 120.0

Event = dict[str, Any]


@dataclass(frozen=True)
class Settings:
    """The schedule every repetition follows."""

    cpu_window_s: float
    step_time_s: float
    timeout_s: float

    @property
    def kill_after_s(self) -> float:
        """When the victim dies, counted from its own start."""
        return SETTLE_S + self.cpu_window_s + KILL_MARGIN_S

    @property
    def steps(self) -> int:
        """Steps per attempt: enough to outlive the kill by TAIL_S."""
        return math.ceil((self.kill_after_s + TAIL_S) / self.step_time_s)


@dataclass(frozen=True)
class Sample:
    """What one repetition measured; None where it could not be measured."""

    launcher: str
    nproc: int
    rep: int
    launch_s: float | None = None
    detect_s: float | None = None
    restart_s: float | None = None
    first_step_s: float | None = None
    cpu_cores: float | None = None
    load_avg: float | None = None
    launcher_procs: int | None = None
    exit_code: int | None = None
    error: str | None = None


SampleT = TypeVar("SampleT")


class RepetitionError(Exception):
    """A repetition did not reach the state it waited for."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launchers", default="elastic,torchrun", help="comma-separated")
    parser.add_argument("--nprocs", default="2,4", help="comma-separated ranks per run")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per launcher and N")
    parser.add_argument("--cpu-window", type=float, default=3.0, help="seconds of CPU sampling")
    parser.add_argument("--step-time", type=float, default=0.5, help="seconds per workload step")
    parser.add_argument("--timeout", type=float, default=60.0, help="bound on each wait")
    args = parser.parse_args(argv)
    args.launchers = args.launchers.split(",")
    args.nprocs = [int(n) for n in args.nprocs.split(",")]
    unknown = sorted(set(args.launchers) - set(LAUNCHERS))
    if unknown:
        parser.error(f"--launchers: unknown {unknown}; allowed: {', '.join(LAUNCHERS)}")
    if args.repeat < 1 or any(n < 2 for n in args.nprocs):
        parser.error("--repeat must be at least 1 and every --nprocs value at least 2")
    return args


def is_available(launcher: str) -> bool:
    """Whether the launcher's CLI answers --help from this interpreter."""
    try:
        probe = subprocess.run(
            [sys.executable, *PROBES[launcher]],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return probe.returncode == 0


def run_dir(work_dir: Path, name: str) -> Path:
    """Where elastic keeps the run directory of one repetition."""
    return work_dir / "elastic-runs" / name


def elastic_argv(nproc: int, work_dir: Path, name: str, *options: str) -> list[str]:
    """``elastic run`` over the workload with one restart allowed, plus ``options``."""
    return [
        *(sys.executable, "-m", "elastic", "run"),
        *("--nproc-per-node", str(nproc), "--max-restarts", "1"),
        *("--run-dir", str(run_dir(work_dir, name)), "--run-id", name),
        *options,
        *("--", sys.executable, str(WORKLOAD)),
    ]


def launcher_argv(launcher: str, nproc: int, work_dir: Path, name: str) -> list[str]:
    """The command line that runs the workload under the launcher with one restart."""
    if launcher == "elastic":
        return elastic_argv(nproc, work_dir, name)
    return [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"),
        *("--nproc-per-node", str(nproc), "--max-restarts", "1"),
        *("--log-dir", str(work_dir / "torchrun-logs" / name)),  # keeps /tmp clean
        str(WORKLOAD),
    ]


def launcher_env(settings: Settings, events_path: Path) -> dict[str, str]:
    """The environment for the launcher, and through it for the ranks."""
    return {
        **os.environ,
        "BENCH_EVENTS": str(events_path),
        "BENCH_STEPS": str(settings.steps),
        "BENCH_STEP_TIME": str(settings.step_time_s),
        "BENCH_KILL_AFTER": str(settings.kill_after_s),
        # torchrun otherwise hands its own rendezvous store's port out as
        # MASTER_PORT; with this it hands out a free port, as elastic does.
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }


def read_events(path: Path) -> list[Event]:
    """All complete event lines written so far."""
    try:
        lines = path.read_text().splitlines(keepends=True)
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.endswith("\n")]


def select(events: list[Event], ev: str, attempt: int) -> list[Event]:
    """The events of one kind from one attempt."""
    return [e for e in events if e["ev"] == ev and e["attempt"] == attempt]


def all_started(nproc: int, attempt: int, ev: str = "started") -> Callable[[list[Event]], bool]:
    """A condition: every rank of the attempt has logged ``ev`` (started, or first_step)."""
    return lambda events: len({e["rank"] for e in select(events, ev, attempt)}) == nproc


def wait_for_events(
    path: Path,
    ready: Callable[[list[Event]], bool],
    proc: subprocess.Popen[bytes],
    timeout_s: float,
) -> list[Event]:
    """Poll the events until ready; fail if the launcher exits first or time runs out."""
    deadline_at = time.monotonic() + timeout_s
    while True:
        events = read_events(path)
        if ready(events):
            return events
        if proc.poll() is not None:
            raise RepetitionError(f"launcher exited with {proc.returncode} first")
        if time.monotonic() >= deadline_at:
            raise RepetitionError(f"not ready after {timeout_s:.0f} s")
        time.sleep(POLL_S)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of the process, all its threads, not its children."""
    if psutil is not None:
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # fields[0] is field 3, "state"
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int) -> list[int]:
    """The process's direct children."""
    if psutil is not None:
        return [child.pid for child in psutil.Process(pid).children()]
    tasks = Path(f"/proc/{pid}/task").iterdir()
    return [int(child) for task in tasks for child in (task / "children").read_text().split()]


def parent_pid(pid: int) -> int:
    """The process's parent."""
    if psutil is not None:
        return int(psutil.Process(pid).ppid())
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])  # field 4, "ppid"


def launcher_pids(launcher_pid: int, rank_pids: set[int]) -> list[int]:
    """The launcher and its helper processes, less the ranks' subtrees.

    That is the launcher's descendants, and the ranks' supervisors with theirs:
    a rank's parent is elastic's spawner, whose parent is the node agent: the
    local launcher itself, or with Ray a node agent actor, which runs under
    Ray's raylets, not under the launcher.
    """
    found: set[int] = set()
    todo = [launcher_pid, *(parent_pid(parent_pid(pid)) for pid in rank_pids)]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += [child for child in child_pids(pid) if child not in rank_pids]
    return sorted(found)


def measure_cpu(pids: list[int], window_s: float) -> tuple[float, float]:
    """The processes' CPU use over a window, in cores, and the window's end (wall clock)."""
    start_cpu, start_at = sum(map(cpu_seconds, pids)), time.monotonic()
    time.sleep(window_s)
    end_cpu, end_at = sum(map(cpu_seconds, pids)), time.monotonic()
    return (end_cpu - start_cpu) / (end_at - start_at), time.time()


def killed_event(events: list[Event]) -> Event:
    """The victim's last words."""
    killed = select(events, "killed", 0)
    if not killed:
        raise RepetitionError("attempt 1 started, but no rank of attempt 0 was killed")
    return killed[0]


def detection_latency(events: list[Event]) -> float | None:
    """From the kill to the first SIGTERM a survivor got; None if none got one."""
    killed = killed_event(events)
    survivors = [e["t"] for e in select(events, "sigterm", 0) if e["rank"] != killed["rank"]]
    return float(min(survivors) - killed["t"]) if survivors else None


def restart_latency(events: list[Event], ev: str = "started") -> float:
    """From the kill to the last rank of attempt 1 logging ``ev``: started, or its first_step."""
    return float(max(e["t"] for e in select(events, ev, 1)) - killed_event(events)["t"])


def marked_pids(marker: bytes) -> list[int]:
    """Processes (ours to read) whose environment holds the marker, this one excepted."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def sweep(marker: bytes) -> list[int]:
    """SIGKILL every marked process until none is left; return those that outlived the bound."""
    deadline_at = time.monotonic() + SWEEP_TIMEOUT_S
    while (pids := marked_pids(marker)) and time.monotonic() < deadline_at:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(POLL_S)
    return pids


def stop_launcher(proc: subprocess.Popen[bytes], events_path: Path) -> None:
    """Kill the launcher's session if alive, then any rank that outlived it."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=SWEEP_TIMEOUT_S)
    # torchrun starts each rank in a session of its own, so find ranks by their environment.
    left = sweep(f"BENCH_EVENTS={events_path}".encode())
    if left:
        print(f"warning: processes {left} survived SIGKILL", file=sys.stderr)


def measure(
    base: Sample, proc: subprocess.Popen[bytes], events_path: Path, popen_t: float, s: Settings
) -> Sample:
    """Follow one launcher run through its kill and restart to its exit."""
    events = wait_for_events(events_path, all_started(base.nproc, 0), proc, s.timeout_s)
    launch_s = max(e["t"] for e in select(events, "started", 0)) - popen_t
    time.sleep(SETTLE_S)
    cpu_cores: float | None
    try:
        pids = launcher_pids(proc.pid, {e["pid"] for e in select(events, "started", 0)})
        cpu_cores, window_end_t = measure_cpu(pids, s.cpu_window_s)
    except PROCESS_GONE as exc:
        raise RepetitionError(f"a launcher process ended during the CPU window: {exc}") from exc
    events = wait_for_events(events_path, all_started(base.nproc, 1, "first_step"), proc, s.timeout_s)
    load_avg = os.getloadavg()[0]
    if killed_event(events)["t"] < window_end_t:
        cpu_cores = None  # the kill fell inside the window: not a steady state
    try:
        exit_code = proc.wait(timeout=s.steps * s.step_time_s + s.timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise RepetitionError("launcher did not exit after the restarted attempt") from exc
    return replace(
        base,
        launch_s=launch_s,
        detect_s=detection_latency(events),
        restart_s=restart_latency(events),
        first_step_s=restart_latency(events, "first_step"),
        cpu_cores=cpu_cores,
        load_avg=load_avg,
        launcher_procs=len(pids),
        exit_code=exit_code,
    )


def run_once(launcher: str, nproc: int, rep: int, settings: Settings, work_dir: Path) -> Sample:
    """Run one repetition and leave no process of it behind."""
    name = f"{launcher}-n{nproc}-r{rep}"
    events_path = work_dir / f"{name}.events.jsonl"
    base = Sample(launcher, nproc, rep)
    return run_launcher(
        base,
        launcher_argv(launcher, nproc, work_dir, name),
        launcher_env(settings, events_path),
        work_dir / f"{name}.log",
        lambda proc, popen_t: measure(base, proc, events_path, popen_t, settings),
    )


def run_launcher(
    base: SampleT,
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    follow: Callable[[subprocess.Popen[bytes], float], SampleT],
) -> SampleT:
    """Start the launcher, let ``follow`` measure it, and leave no process of it behind.

    ``follow`` gets the launcher and the wall-clock time just before it
    started; a :class:`RepetitionError` it raises becomes ``base`` with the
    error. The ranks are found by ``env["BENCH_EVENTS"]``.
    """
    with open(log_path, "wb") as log:
        popen_t = time.time()
        proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return follow(proc, popen_t)
        except RepetitionError as exc:
            return replace(base, error=f"{exc} (see {log.name})")  # type: ignore[type-var]
        finally:
            stop_launcher(proc, Path(env["BENCH_EVENTS"]))


def sample_key(sample: Sample) -> str:
    """The group a sample belongs to: "launcher/N"."""
    return f"{sample.launcher}/{sample.nproc}"


def summarize(
    samples: Sequence[Any],
    metrics: Iterable[str] = METRICS,
    key: Callable[[Any], str] = sample_key,
) -> dict[str, dict[str, Any]]:
    """Median and count of each metric (a sample attribute) per group of samples."""
    metrics = list(metrics)
    summary: dict[str, dict[str, Any]] = {}
    for sample in samples:
        entry = summary.setdefault(key(sample), {m: [] for m in metrics} | {"runs": 0})
        entry["runs"] += 1
        for metric in metrics:
            value = getattr(sample, metric)
            if value is not None:
                entry[metric].append(value)
    return {
        group: {"runs": entry["runs"]}
        | {m: {"median": median_or_none(entry[m]), "n": len(entry[m])} for m in metrics}
        for group, entry in summary.items()
    }


def median_or_none(values: list[float]) -> float | None:
    """The median, or None for no values."""
    return statistics.median(values) if values else None


def format_cell(stats: dict[str, Any], runs: int) -> str:
    """A median, with the count of valid samples when some are missing."""
    if stats["median"] is None:
        return "-"
    cell = f"{stats['median']:.4f}"
    return cell if stats["n"] == runs else f"{cell} ({stats['n']}/{runs})"


def format_ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    """Give the first median over the second (elastic's over torchrun's)."""
    if not a or not b or a["median"] is None or not b["median"]:
        return "n/a"
    return f"{a['median'] / b['median']:.2f}"


def format_table(
    summary: dict[str, dict[str, Any]], nprocs: list[int], absent: dict[str, str]
) -> str:
    """Medians per metric for both launchers side by side, with their ratio.

    ``absent`` says why a launcher has no results ("not installed", "not run").
    """
    rows: list[tuple[str, ...]] = [("N", "metric", *LAUNCHERS, "elastic/torchrun")]
    for nproc in nprocs:
        found = {name: summary.get(f"{name}/{nproc}") for name in LAUNCHERS}
        for metric, label in METRICS.items():
            stats = [entry[metric] if entry else None for entry in found.values()]
            cells = [
                format_cell(entry[metric], entry["runs"]) if entry else absent[name]
                for name, entry in found.items()
            ]
            rows.append((str(nproc), label, *cells, format_ratio(*stats)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so cleanup runs as it does for Ctrl-C."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def run_all(
    launchers: list[str], nprocs: list[int], repeat: int, settings: Settings, work_dir: Path
) -> list[Sample]:
    """Run every repetition: per N, each launcher in turn, so drift hits both alike."""
    samples = []
    for nproc in nprocs:
        for rep in range(repeat):
            for launcher in launchers:
                sample = run_once(launcher, nproc, rep, settings, work_dir)
                print(sample, file=sys.stderr, flush=True)
                samples.append(sample)
    return samples


def package_version(name: str) -> str | None:
    """The installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def write_results(settings: Settings, samples: list[Sample], stamp: str) -> Path:
    """Save the settings, the environment, every sample and the summary as JSON."""
    results = {
        "created": stamp,
        "python": sys.version.split()[0],
        "versions": {name: package_version(name) for name in ("elastic", "torch", "psutil")},
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "settings": asdict(settings)
        | {"kill_after_s": settings.kill_after_s, "steps": settings.steps},
        "samples": [asdict(sample) for sample in samples],
        "summary": summarize(samples, [*METRICS, "load_avg"]),
    }
    out = RESULTS_DIR / f"bench-{stamp}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    """Run every repetition, print the table, save the results."""
    args = parse_args(argv)
    exit_on_sigterm()
    settings = Settings(args.cpu_window, args.step_time, args.timeout)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work_dir = RESULTS_DIR / f"bench-{stamp}"
    work_dir.mkdir(parents=True)
    available = [name for name in args.launchers if is_available(name)]
    absent = {name: "not installed" if name in args.launchers else "not run" for name in LAUNCHERS}
    for name in sorted(set(args.launchers) - set(available)):
        print(f"{name}: not installed", file=sys.stderr)
    samples = run_all(available, args.nprocs, args.repeat, settings, work_dir)
    print(format_table(summarize(samples), args.nprocs, absent))
    for group, entry in summarize(samples, ["load_avg"]).items():
        print(f"{group}: 1-minute load average after the restart, median {entry['load_avg']['median']:.2f}")
    print(f"results: {write_results(settings, samples, stamp)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
