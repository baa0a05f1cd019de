"""The runner: one schedule against each launcher in turn, the truth and elastic's ledger, the table.

Each launcher runs the same training program (``train_ddp.py``, 2 gloo ranks) for the
schedule's duration, faces the same events from the replayer, and is requeued, as a
scheduler would, when its machine or its driver was lost (or, for elastic, when it asks to
be, exit status 75). The truth is the program's log (:mod:`goodput.truth`); elastic's ledger
is its ``report.json``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from goodput.replayer import Job, LauncherSpec, inject
from goodput.schedule import Event, Schedule
from goodput.truth import Truth, read_lines, recoveries, truth, young_daly_s

__all__ = [
    "LAUNCHERS", "PROGRAMS", "STOP", "JobResult", "Settings", "format_table", "log_injected", "nvrx_missing",
    "run_job", "torchft_missing", "with_program",
]

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parent
REPO_ROOT = BENCHMARKS.parent
PROGRAM = HERE / "train_ddp.py"
PROGRAMS = {"ddp": PROGRAM, "jax": HERE / "train_jax.py"}  # --program: the gloo DDP job, or JAX's
POLL_S = 0.02
RUN_ID = "goodput"
STOP = threading.Event()  # set: every run_job stops its job and raises SystemExit (jobs run in threads)


@dataclass(frozen=True)
class Settings:
    """What every launcher's run shares besides the schedule."""

    step_s: float = 0.2
    checkpoint_every: int = 10
    checkpoint_cost_s: float = 0.0
    timeout_s: float = 15.0  # the process group's: how long a peer waits in a collective
    finish_timeout_s: float = 120.0  # past the schedule's end, before a run is called hung
    requeue_delay_s: float = 0.0
    clock: str = "launch"  # the schedule's time 0: the launch, or ("first-step") the job's first step
    program: str = "ddp"  # a key of PROGRAMS


ORPHAN_LEASE_S = 60  # elastic-lease's --orphan-lease: the default, far past any requeue here


def _elastic(backend: str, *, lease: bool = False) -> LauncherSpec:
    def argv(work: Path, requeue: int) -> list[str]:
        return [
            *(sys.executable, "-m", "elastic", "run", "--backend", backend, "--nproc-per-node", "2"),
            *("--max-restarts", "100000", "--run-id", RUN_ID, "--run-dir", str(work / "run")),
            *("--checkpoint-dir", str(work / "checkpoints"), "--preempt-signal", "none"),
            *(("--orphan-lease", str(ORPHAN_LEASE_S)) if lease else ()),
            *("--", sys.executable, str(PROGRAM)),
        ]

    name = ("elastic" if backend == "local" else "elastic-ray") + ("-lease" if lease else "")
    return LauncherSpec(name, "elastic", argv, notice_signal=signal.SIGUSR1, requeue_codes=frozenset({75}),
                        keeps_ranks=lease)


def _torchrun(work: Path, requeue: int) -> list[str]:
    return [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"),
        *("--nproc-per-node", "2", "--max-restarts", "100000"),
        *("--log-dir", str(work / "torchrun-logs" / str(requeue)), "--redirects", "3"),
        str(PROGRAM),
    ]


NVRX_PYTHON = os.environ.get("BENCH_NVRX_PYTHON", sys.executable)  # where nvidia-resiliency-ext is installed
NVRX_HEARTBEAT_TIMEOUT_S = 10  # a step is 0.1 to 0.5 s, a save under 1 s: a rank silent this long hangs


def _nvrx(work: Path, requeue: int) -> list[str]:
    """NVIDIA's ``ft_launcher``: torchrun's command line, and its rank monitors watching the ranks' heartbeats."""
    return [
        *(NVRX_PYTHON, "-m", "nvidia_resiliency_ext.fault_tolerance.launcher", "--standalone", "--nnodes", "1"),
        *("--nproc-per-node", "2", "--max-restarts", "100000"),
        *("--ft-initial-rank-heartbeat-timeout", "300", "--ft-rank-heartbeat-timeout", str(NVRX_HEARTBEAT_TIMEOUT_S)),
        *("--log-dir", str(work / "ft-launcher-logs" / str(requeue)), "--redirects", "3"),
        str(PROGRAM),
    ]


def nvrx_missing() -> str | None:
    """Why ``--launchers nvrx`` cannot run here, or None: ``NVRX_PYTHON`` must import the extension."""
    check = [NVRX_PYTHON, "-c", "import nvidia_resiliency_ext.fault_tolerance.launcher"]
    try:
        if subprocess.run(check, capture_output=True).returncode == 0:
            return None
    except OSError:  # no such Python
        pass
    return (f"nvidia-resiliency-ext is not installed for {NVRX_PYTHON}; pip install it there, or name a "
            "Python that has it in BENCH_NVRX_PYTHON (docs/operating/goodput.md)")


TORCHFT_PYTHON = os.environ.get("BENCH_TORCHFT_PYTHON", sys.executable)  # where torchft is installed


def _torchft(work: Path, requeue: int) -> list[str]:
    """torchft: a lighthouse and a torchrun per replica group (``goodput/torchft_job.py``)."""
    return [TORCHFT_PYTHON, str(HERE / "torchft_job.py"), str(work / "torchft-logs" / str(requeue))]


def torchft_missing() -> str | None:
    """Why ``--launchers torchft`` cannot run here, or None: ``TORCHFT_PYTHON`` must import torchft."""
    try:
        if subprocess.run([TORCHFT_PYTHON, "-c", "import torchft"], capture_output=True).returncode == 0:
            return None
    except OSError:  # no such Python
        pass
    return (f"torchft is not installed for {TORCHFT_PYTHON}; pip install it there, or name a "
            "Python that has it in BENCH_TORCHFT_PYTHON (docs/operating/goodput.md)")


def _ray_train(work: Path, requeue: int) -> list[str]:
    return [sys.executable, str(HERE / "ray_train.py"), str(work / "ray-storage"), RUN_ID]


LAUNCHERS = {
    spec.name: spec
    for spec in (
        _elastic("local"),
        _elastic("local", lease=True),
        _elastic("ray"),
        LauncherSpec("torchrun", "torchrun", _torchrun),
        LauncherSpec("ray-train", "ray", _ray_train),
        LauncherSpec("nvrx", "torchrun", _nvrx),
        LauncherSpec("torchft", "torchft", _torchft),
    )
}


@dataclass
class JobResult:
    """What one launcher's run under the schedule gave."""

    launcher: str
    verdict: str
    wall_s: float
    truth: Truth
    injected: list[dict[str, Any]]
    scheduled: int
    recoveries: list[float | None]
    starts: int
    exit_codes: list[int] = field(default_factory=list)
    ledger: dict[str, Any] | None = None  # elastic's: productive over duration, its causes

    def recovery_by_kind(self) -> dict[str, list[float]]:
        """Recovery seconds of each kind of event (those that recovered)."""
        out: dict[str, list[float]] = {}
        for line, seconds in zip(self.injected, self.recoveries, strict=True):
            if seconds is not None:
                out.setdefault(line["kind"], []).append(seconds)
        return out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"goodput": self.truth.goodput, "redone": self.truth.redone}


def _env(spec: LauncherSpec, work: Path, settings: Settings, ray_tmp: str) -> dict[str, str]:
    control = work / "control"
    control.mkdir(parents=True, exist_ok=True)
    (work / "checkpoints").mkdir(exist_ok=True)
    path = os.pathsep.join([str(REPO_ROOT), str(BENCHMARKS), os.environ.get("PYTHONPATH", "")])
    env = {
        **os.environ,
        "PYTHONPATH": path.rstrip(os.pathsep),
        "BENCH_MARK": f"{spec.name}-{os.getpid()}-{time.time_ns()}",
        "BENCH_FLAVOUR": spec.flavour,
        "BENCH_CONTROL": str(control),
        "BENCH_LOG": str(work / "steps.jsonl"),
        "BENCH_STEP_TIME": repr(settings.step_s),
        "BENCH_CHECKPOINT_EVERY": str(settings.checkpoint_every),
        "BENCH_CHECKPOINT_COST": repr(settings.checkpoint_cost_s),
        "BENCH_CHECKPOINT_DIR": str(work / "checkpoints"),
        "BENCH_TIMEOUT": repr(settings.timeout_s),
        "BENCH_RAY_TMP": ray_tmp,
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }
    # Each job's Ray is its own: elastic on Ray would join a cluster it finds recorded in the temporary
    # folder (a user's, or a test's), so its temporary folder is the job's own, and no address is named.
    env.pop("RAY_ADDRESS", None)
    if spec.flavour == "elastic":
        env["TMPDIR"] = ray_tmp
    return env


def run_job(spec: LauncherSpec, schedule: Schedule, work: Path, settings: Settings) -> JobResult:
    """Run the program under ``spec`` for the schedule's duration, injecting its events."""
    work.mkdir(parents=True, exist_ok=True)
    spec = with_program(spec, settings.program)
    ray_tmp = tempfile.mkdtemp(prefix="gp-ray-")  # short: Ray's socket paths have a limit
    launched = time.time()
    job = Job(spec, work, _env(spec, work, settings, ray_tmp))
    t0, end_at = launched, launched + schedule.duration_s
    if settings.clock == "first-step":  # the schedule starts with the job's first step
        t0, end_at = math.inf, math.inf
    else:
        (job.control / "end_at").write_text(repr(end_at))
    pending = list(enumerate(schedule.events))
    deadlines: list[dict[str, Any]] = []
    exit_codes: list[int] = []
    verdict = ""
    job.start()
    try:
        while not verdict:
            if STOP.is_set():
                raise SystemExit(f"{spec.name}: stopped")
            now = time.time()
            assert job.proc is not None
            if t0 == math.inf and (first := _first_step_at(work / "steps.jsonl")) is not None:
                t0, end_at = first, first + schedule.duration_s
                (job.control / "end_at").write_text(repr(end_at))
            if job.proc.poll() is not None and not job.taken:
                exit_codes.append(job.proc.returncode)
                if job.proc.returncode in spec.requeue_codes:
                    job.taken = True
                elif job.proc.returncode == 0:
                    verdict = "finished"
                else:
                    verdict = f"gave up (exit {job.proc.returncode})"
                    _say_why(spec.name, job.work_dir / f"launcher-{job.starts - 1}.log")
            if job.taken and not verdict:
                if now >= end_at:
                    verdict = "finished (lost at the end)"
                else:
                    time.sleep(settings.requeue_delay_s)
                    job.start()
                continue
            for line in [d for d in deadlines if d["deadline"] <= now]:
                deadlines.remove(line)
                if line["instance"] == job.starts and job.proc.poll() is None:
                    job.take_machine()
            if pending and now >= t0 + pending[0][1].at_s and now < end_at:
                index, event = pending[0]
                line = inject(job, index, event)
                if line is not None:
                    pending.pop(0)
                    line["deferred_s"] = line["t"] - (t0 + event.at_s)
                    line["t_rel"] = line["t"] - t0
                    log_injected(work / "events.jsonl", line, event)
                    if "deadline" in line:
                        deadlines.append(line)
                    print(f"  {spec.name}: {line['t_rel']:7.2f}s {event.describe()}", file=sys.stderr, flush=True)
                    continue
            if now > (end_at if end_at < math.inf else launched + schedule.duration_s) + settings.finish_timeout_s:
                verdict = f"not done {settings.finish_timeout_s:g} s after the end (stopped)"  # hung, or still restarting
                job.take_machine()
            time.sleep(POLL_S)
        ended = time.time()
    finally:
        if job.proc is not None:
            job.take_machine()  # whatever outlived the launcher (Ray's processes) goes too
        shutil.rmtree(ray_tmp, ignore_errors=True)
    log = read_lines((work / "steps.jsonl").read_text()) if (work / "steps.jsonl").exists() else []
    found = truth(log, ended - launched, nominal_step_s=settings.step_s)
    return JobResult(
        spec.name,
        verdict,
        ended - launched,
        found,
        job.injected,
        len(schedule.events),
        recoveries(log, job.injected),
        job.starts,
        exit_codes,
        elastic_ledger(work / "run" / "report.json") if spec.flavour == "elastic" else None,
    )


def _say_why(name: str, log: Path, lines: int = 8) -> None:
    """Print the end of the launcher's own log: a launcher that gave up says why there."""
    try:
        tail = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError as error:
        tail = [f"(its log {log} cannot be read: {error})"]
    print(f"{name} gave up; its log ends:", *(f"  | {line}" for line in tail), sep="\n", file=sys.stderr, flush=True)


def log_injected(path: Path, line: dict[str, Any], event: Event) -> None:
    """Append the injected event to the launcher's events log, as ``elastic report --events`` reads
    it: its wall time ``t``, ``kind``, ``target`` and ``cause``, then the replayer's own fields."""
    target = f"rank {event.rank}" if event.rank is not None else event.target
    entry = {"t": line["t"], "kind": event.kind, "target": target, "cause": event.cause,
             **{k: v for k, v in line.items() if k not in ("t", "kind")}}
    with open(path, "a") as log:
        log.write(json.dumps(entry) + "\n")


def with_program(spec: LauncherSpec, program: str) -> LauncherSpec:
    """``spec`` running ``PROGRAMS[program]`` in place of the DDP program (Ray Train and torchft run only that one)."""
    if program == "ddp":
        return spec
    if spec.flavour in ("ray", "torchft"):
        raise ValueError(f"--program {program}: not under {spec.name}; see docs/operating/goodput.md")
    path = str(PROGRAMS[program])

    def argv(work: Path, requeue: int) -> list[str]:
        return [path if arg == str(PROGRAM) else arg for arg in spec.argv(work, requeue)]

    return replace(spec, argv=argv)


def _first_step_at(path: Path) -> float | None:
    """When the job's first step was logged, if it was."""
    try:
        with open(path) as log:
            first = log.readline()
    except FileNotFoundError:
        return None
    return float(json.loads(first)["t"]) if first.endswith("\n") and '"step"' in first else None


def elastic_ledger(report_path: Path) -> dict[str, Any] | None:
    """elastic's own account: productive seconds over the run's wall time, its causes, its failures."""
    try:
        report = json.loads(report_path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return ledger_of(report)


def reread_ledger(job: Path) -> dict[str, Any] | None:
    """elastic's account of an elastic job's folder (``RESULTS/CASE/elastic``) as this checkout's
    ledger reads the run's journal, up to the run's end as its own report had it: the journal is
    what happened, the ledger what elastic makes of it, and a fixed ledger reads an old run anew.
    None where the run left no journal or report."""
    from elastic.core.journal.fold import fold
    from elastic.views.report import build_report

    run_dir = job / "run"
    try:
        written = json.loads((run_dir / "report.json").read_text())
        run = fold(read_lines((run_dir / "journal.jsonl").read_text()))
        ended = written.get("ended_at")
        ended_s = run.since_start(datetime.fromisoformat(ended).timestamp()) if ended else run.now_s
    except (OSError, ValueError):
        return None
    return ledger_of(build_report(run, command=written.get("command") or [], ended_s=ended_s))


def ledger_of(report: dict[str, Any]) -> dict[str, Any]:
    """The account a ``report.json`` gives: productive over its duration, its causes, its failures."""
    ledger = report.get("ledger") or {}
    duration = report.get("duration_s") or 0.0
    failures = sum(len(attempt.get("failures") or []) for attempt in report.get("attempts", []))
    notices = sum(1 for attempt in report.get("attempts", []) if attempt.get("preemption_notice"))
    driver_died = sum(1 for attempt in report.get("attempts", []) if attempt.get("driver_died"))
    return {
        "goodput": ledger.get("productive", 0.0) / duration if duration else None,
        "duration_s": duration,
        "causes": ledger,
        "attempts": len(report.get("attempts", [])),
        "failures": failures,
        "notices": notices,
        "driver_died": driver_died,
        "outcome": report.get("outcome"),
    }


def _cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(
    results: Sequence[JobResult],
    schedule: Schedule,
    settings: Settings,
    baselines: dict[str, float | None] | None = None,
) -> str:
    """The table the issue asks for, one column per launcher, as Markdown."""
    names = [r.launcher for r in results]
    rows: list[list[str]] = [["", *names], ["---", *("---" for _ in names)]]

    def row(label: str, cells: list[str]) -> None:
        rows.append([label, *cells])

    row("goodput (truth)", [_cell(r.truth.goodput) for r in results])
    if baselines:
        row("goodput with no events", [_cell(baselines.get(r.launcher)) for r in results])
        row("goodput / with no events", [
            _cell(r.truth.goodput / b if r.truth.goodput is not None and (b := baselines.get(r.launcher)) else None, 2)
            for r in results
        ])
    row("elastic's ledger", [_cell(r.ledger["goodput"]) if r.ledger else "-" for r in results])
    row("disruptions the ledger saw (failed attempts, notices, dead drivers)", [
        f"{r.ledger['attempts'] - 1} ({r.ledger['failures']} failures, {r.ledger['notices']}, {r.ledger['driver_died']})"
        if r.ledger else "-"
        for r in results
    ])
    row("events injected / scheduled", [f"{len(r.injected)}/{r.scheduled}" for r in results])
    kinds = sorted({line["kind"] for r in results for line in r.injected})
    for kind in kinds:
        cells = []
        for r in results:
            seconds = r.recovery_by_kind().get(kind, [])
            cells.append(f"{statistics.median(seconds):.1f} / {max(seconds):.1f} ({len(seconds)})" if seconds else "-")
        row(f"recovery s, {kind}: median / worst (n)", cells)
    row("steps kept / redone", [f"{r.truth.unique_steps} / {r.truth.redone}" for r in results])
    row("launcher starts (requeues + 1)", [str(r.starts) for r in results])
    row("wall s", [f"{r.wall_s:.1f}" for r in results])
    row("undisturbed step s", [_cell(r.truth.step_s) for r in results])
    row("checkpoint cost s (median)", [_cell(r.truth.checkpoint_s) for r in results])
    interval = settings.checkpoint_every * settings.step_s
    row("checkpoint interval s (used)", [f"{interval:.2f}" for _ in results])
    row("Young/Daly interval s", [
        _cell(young_daly_s(r.truth.checkpoint_s, schedule.mtbf_s), 2) if r.truth.checkpoint_s is not None else "-"
        for r in results
    ])
    row("verdict", [r.verdict for r in results])
    return "\n".join("| " + " | ".join(cells) + " |" for cells in rows)
