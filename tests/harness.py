"""The process tests' harness: run ``python -m elastic`` for real and read what it left behind."""

from __future__ import annotations

import importlib.util
import json
import os
import pty
import re
import select
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

BIN = Path(__file__).resolve().parent / "bin"
REPO = BIN.parent.parent

# Bounds on waits; generous on purpose: a hung launcher fails the test, a slow one does not.
RUN_TIMEOUT_S = 60.0
WAIT_TIMEOUT_S = 15.0
# Ranks started: on Ray under load (three workers, each with its cluster) a launch takes tens of
# seconds; a wait is no claim about speed (benchmarks/ measure that), so it is generous.
RANKS_STARTED_S = 60.0

T = TypeVar("T")

# Long-lived process trees a module fixture started on purpose (a Ray cluster);
# the no-orphans check of tests/conftest.py lets them outlive a test.
ALLOWED_ROOTS: set[int] = set()


def allow_process_trees(pids: set[int]) -> None:
    """Let these processes and their descendants outlive tests (a module's Ray cluster).

    Ranks (they carry ``ELASTIC_RUN_ID``) and elastic's node agent actors are
    never allowed to, wherever they sit in the tree.
    """
    ALLOWED_ROOTS.update(pids)


def descendants() -> set[int]:
    """Every live descendant of this process (pytest is a child subreaper: orphans too)."""
    return {child.pid for child in psutil.Process().children(recursive=True)}


def script(name: str, *args: object) -> list[str]:
    """The argv that runs tests/bin/NAME with this Python."""
    return [sys.executable, str(BIN / name), *map(str, args)]


def per_rank(*commands: Sequence[object]) -> list[str]:
    """An argv that runs ``commands[RANK]`` in each rank (``'x.py'`` names a tests/bin script)."""
    return [sys.executable, str(BIN / "per_rank.py")] + [
        shlex.join(str(part) for part in command) for command in commands
    ]


# Frameworks imported by tests in this process write these into os.environ (inductor
# sets its cache directory there the first time it asks for it); a launcher started
# afterwards must not take them for the user's own settings.
_SET_BY_FRAMEWORKS = frozenset({"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR"})
_SET_AT_START = frozenset(k for k in _SET_BY_FRAMEWORKS if k in os.environ)


def launcher_env(**extra: str) -> dict[str, str]:
    """This process's environment without the variables the launcher may set, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "PYTHONFAULTHANDLER")
        and not k.startswith(("ELASTIC_", "TORCHELASTIC_"))
        and (k not in _SET_BY_FRAMEWORKS or k in _SET_AT_START)
    }
    env.update(extra)
    return env


def elastic_command(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m elastic ARGS`` run to its end with its output captured (a status, a
    report, a usage error); never raises on its exit status."""
    return subprocess.run(
        [sys.executable, "-m", "elastic", *map(str, args)], capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S, env=launcher_env(), stdin=subprocess.DEVNULL, cwd=cwd, check=False,
    )


def status_text(run_dir: Path) -> str:
    """What ``elastic status RUN_DIR`` prints; it must succeed."""
    shown = elastic_command("status", run_dir)
    assert 0 == shown.returncode, shown.stderr
    return shown.stdout


def wait_for(predicate: Callable[[], T | None], what: str, timeout_s: float = WAIT_TIMEOUT_S) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout_s``."""
    deadline_at = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline_at:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.02)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    """The launcher's metrics endpoint, parsed by Prometheus' own text parser:
    (name, sorted labels without run_id) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "run_id"))
            samples[(sample.name, labels)] = sample.value
    return samples


def heartbeat_age(samples: Samples, rank: int) -> float | None:
    return samples.get(("elastic_heartbeat_age_seconds", (("rank", str(rank)),)))


def agent_of(rank: int) -> int:
    """The node agent's process of a rank: its spawner's parent (the launcher, or a Ray actor)."""
    return int(psutil.Process(psutil.Process(rank).ppid()).ppid())


def is_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (dead, not yet reaped) counts as gone."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def read_pids(directory: Path, count: int, timeout_s: float = RANKS_STARTED_S) -> list[int]:
    """Wait for ``count`` rank pid files in ``directory``; every pid they hold, rank order."""

    def files() -> list[Path] | None:
        found = sorted(directory.glob("rank-*.pid"))
        return found if len(found) >= count else None

    paths = wait_for(files, f"{count} pid files in {directory}", timeout_s)
    return [int(word) for path in paths for word in path.read_text().split()]


# A training step as frameworks and plain scripts print it: "step 12", "step=12", "step: 12".
STEP_LINE = re.compile(r"\bstep[ =:]+(\d+)")


def latest_step(text: str) -> int | None:
    """The highest step number printed in ``text`` (a rank's log), if any."""
    steps = [int(match) for match in STEP_LINE.findall(text)]
    return max(steps) if steps else None


def rank_processes(root: int) -> dict[int, int]:
    """The ranks under launcher ``root``: rank → pid, read from their environment.

    A rank is the outermost process that carries ``ELASTIC_RUN_ID`` and
    ``RANK`` (its own children, such as data loader workers, inherit both).
    """
    try:
        tree = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return {}
    ranks: dict[int, tuple[int, int]] = {}  # pid -> (rank, parent pid)
    for process in tree:
        try:
            env = process.environ()
            if "ELASTIC_RUN_ID" in env and "RANK" in env and process.status() != psutil.STATUS_ZOMBIE:
                ranks[process.pid] = (int(env["RANK"]), process.ppid())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return {rank: pid for pid, (rank, parent) in ranks.items() if parent not in ranks}


@dataclass
class Finished:
    """A launcher run that ended: its status, console output and run directory."""

    returncode: int
    stdout: str
    stderr: str
    run_dir: Path

    def journal(self) -> list[dict[str, Any]]:
        lines = (self.run_dir / "journal.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.journal() if e["event"] == name]

    def report(self) -> dict[str, Any]:
        report: dict[str, Any] = json.loads((self.run_dir / "report.json").read_text())
        return report

    def rank_log(self, attempt: int, rank: int) -> str:
        return (self.run_dir / f"attempt-{attempt}" / f"rank-{rank}.log").read_text(
            errors="replace"
        )

    def explain(self) -> str:
        """What to print when an assertion about this run fails."""
        return f"exit status {self.returncode}\n--- stderr ---\n{self.stderr[-4000:]}"


class Launcher:
    """Starts ``python -m elastic run`` in a test's tmp_path; kills by pid what it started."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.run_dir = tmp_path / "run"
        self._started: list[subprocess.Popen[bytes]] = []

    def argv(self, options: Sequence[object], command: Sequence[object] | None) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "elastic",
            "run",
            "--run-dir",
            str(self.run_dir),
            "--log-format",
            "json",
            *map(str, options),
        ]
        if command is not None:
            argv += ["--", *map(str, command)]
        return argv

    def run(
        self,
        *options: object,
        command: Sequence[object] | None,
        env: dict[str, str] | None = None,
        timeout_s: float = RUN_TIMEOUT_S,
        raw_argv: Sequence[str] | None = None,
        cwd: Path | None = None,
    ) -> Finished:
        """Run the launcher to the end (bounded) and collect what it printed; it starts in
        ``cwd`` (default: the test's tmp_path)."""
        argv = list(raw_argv) if raw_argv is not None else self.argv(options, command)
        process = self.start_argv(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._kill(process)
            pytest.fail(f"the launcher did not end within {timeout_s}s: {argv}")
        return Finished(
            process.returncode,
            stdout.decode(errors="replace"),
            stderr.decode(errors="replace"),
            self.run_dir,
        )

    def start(
        self,
        *options: object,
        command: Sequence[object],
        env: dict[str, str] | None = None,
        stdout: int | None = subprocess.DEVNULL,
        stderr: int | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start the launcher in its own session (signals sent to it reach it alone).

        Its stderr goes to tmp_path/launcher.stderr unless ``stderr`` says otherwise.
        """
        argv = self.argv(options, command)
        if stderr is not None:
            return self.start_argv(argv, env=env, stdout=stdout, stderr=stderr)
        with (self.tmp_path / "launcher.stderr").open("wb") as stderr_file:
            return self.start_argv(argv, env=env, stdout=stdout, stderr=stderr_file.fileno())

    def start_argv(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None,
        stdout: int | None,
        stderr: int | None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            list(argv),
            cwd=self.tmp_path if cwd is None else cwd,
            env=env if env is not None else launcher_env(),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        self._started.append(process)
        return process

    def finished(
        self, process: subprocess.Popen[bytes], timeout_s: float = RUN_TIMEOUT_S
    ) -> Finished:
        """Wait (bounded) for a launcher from :meth:`start` and read its run directory."""
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._kill(process)
            pytest.fail(f"the launcher did not end within {timeout_s}s")
        stderr_file = self.tmp_path / "launcher.stderr"
        stderr = stderr_file.read_text(errors="replace") if stderr_file.exists() else ""
        return Finished(process.returncode, "", stderr, self.run_dir)

    def wait_for_event(self, name: str, timeout_s: float = WAIT_TIMEOUT_S) -> dict[str, Any]:
        """The first journal event called ``name``, once the launcher has written it."""

        def find() -> dict[str, Any] | None:
            try:
                lines = (self.run_dir / "journal.jsonl").read_text().splitlines()
            except FileNotFoundError:
                return None
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line still being written
                if isinstance(event, dict) and event.get("event") == name:
                    return dict(event)
            return None

        return wait_for(find, f"journal event {name!r}", timeout_s)

    def kill_rank_at_step(
        self,
        process: subprocess.Popen[bytes],
        rank: int,
        step: int,
        attempt: int = 0,
        timeout_s: float = RUN_TIMEOUT_S,
        signum: int = signal.SIGKILL,
    ) -> float:
        """SIGKILL (or ``signum``) ``rank`` from outside once its log shows ``step``; the wall time of the kill.

        The rank's log is ``attempt-N/rank-R.log`` in the run directory; the
        step is read with :data:`STEP_LINE`.
        """
        log = self.run_dir / f"attempt-{attempt}" / f"rank-{rank}.log"

        def reached() -> int | None:
            if process.poll() is not None:
                pytest.fail(f"the launcher ended (status {process.returncode}) before rank {rank} reached step {step}")
            text = log.read_text(errors="replace") if log.exists() else ""
            latest = latest_step(text)
            pid = rank_processes(process.pid).get(rank)
            return pid if latest is not None and latest >= step and pid else None

        pid = wait_for(reached, f"rank {rank} at step {step} in {log}", timeout_s)
        os.kill(pid, signum)  # by pid: a rank of the launcher this fixture started
        return time.time()

    def started_pids(self) -> list[int]:
        """The pids of every launcher this fixture started (each a possible Ray driver)."""
        return [process.pid for process in self._started]

    def _kill(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)  # by pid: only what this fixture started
        process.wait(10)

    def close(self) -> None:
        for process in self._started:
            self._kill(process)
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


def on_a_terminal(tmp_path: Path, *options: object, command: list[object]) -> tuple[int, str]:
    """``elastic run`` with stdout and stderr on one pseudo-terminal: its status and the screen."""
    primary, secondary = pty.openpty()
    argv = [sys.executable, "-m", "elastic", "run", "--run-dir", str(tmp_path / "run"), *map(str, options),
            "--", *map(str, command)]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary, cwd=tmp_path,
                               env={**launcher_env(), "TERM": "xterm"}, start_new_session=True)
    os.close(secondary)
    screen = b""
    deadline_at = time.monotonic() + RUN_TIMEOUT_S
    try:
        while time.monotonic() < deadline_at:
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:
                    break  # the launcher closed the terminal
                if not chunk:
                    break
                screen += chunk
            elif process.poll() is not None:
                break
        return process.wait(10), screen.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()  # by its own pid: the launcher this test started
            process.wait(10)
        os.close(primary)


def skip_unless_installed(*modules: str) -> None:
    """Skip the calling module (or test) unless every one of ``modules`` is installed.

    Unlike ``pytest.importorskip`` it imports none of them: a framework the test
    process does not use itself (its ranks do) costs seconds to import for nothing.
    """
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # its parent package is missing
            found = False
        if not found:
            missing.append(name)
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}", allow_module_level=True)


def differing_tensors(expected: Path, actual: Path) -> list[str]:
    """What differs between two state dicts saved with ``torch.save``: the names of the tensors
    that are not bit-identical, or one line saying the names themselves differ."""
    import torch  # only where a test compares weights

    before = torch.load(expected, weights_only=True)
    after = torch.load(actual, weights_only=True)
    if list(before) != list(after):
        return [f"names differ: {list(before)} != {list(after)}"]
    return [name for name in before if not torch.equal(before[name], after[name])]


@dataclass
class KilledBeside:
    """A run whose rank was SIGKILLed from outside, and the same run left alone beside it."""

    interrupted: Finished
    uninterrupted: Finished
    saved_at_kill: int | None  # the newest complete checkpoint when the kill landed

    def assert_resumed_once_from(self, rank: int, resume_step: int) -> None:
        """The run left alone: one attempt, from scratch. The other: ``resume_step`` was the newest
        checkpoint at the kill, and one restart after ``rank``'s SIGKILL resumed from it."""
        assert_one_attempt_from_scratch(self.uninterrupted)
        assert resume_step == self.saved_at_kill
        assert_one_restart_after_a_sigkill(self.interrupted, rank, resume_step)


def kill_beside_an_uninterrupted_run(
    launcher: Launcher,
    tmp_path: Path,
    options: Callable[[str], Sequence[object]],
    command: Callable[[str], Sequence[object]],
    *,
    rank: int,
    step: int,
    latest_checkpoint: Callable[[], int | None],
    timeout_s: float = RUN_TIMEOUT_S,
) -> KilledBeside:
    """Start the same training twice at once: ``"A"`` left alone (in tmp_path/A), ``"B"`` (run
    directory tmp_path/runB) with ``rank`` SIGKILLed once its log shows ``step``.

    ``options(name)`` and ``command(name)`` give each its own directories; ``latest_checkpoint``
    is read right after the kill. Both runs end (bounded) before this returns.
    """
    reference = Launcher(tmp_path / "A")
    reference.tmp_path.mkdir()
    try:
        reference_process = reference.start(*options("A"), command=command("A"))
        launcher.run_dir = tmp_path / "runB"
        process = launcher.start(*options("B"), command=command("B"))
        launcher.kill_rank_at_step(process, rank=rank, step=step, timeout_s=timeout_s)
        saved_at_kill = latest_checkpoint()
        interrupted = launcher.finished(process, timeout_s=timeout_s)
        uninterrupted = reference.finished(reference_process, timeout_s=timeout_s)
    finally:
        reference.close()
    return KilledBeside(interrupted, uninterrupted, saved_at_kill)


def assert_one_restart_after_a_sigkill(run: Finished, rank: int, resume_step: int | None) -> dict[str, Any]:
    """``run`` succeeded in two attempts: the first ended by ``rank``'s SIGKILL, the second
    resumed from ``resume_step`` (journal and report agree). The second attempt's report."""
    assert 0 == run.returncode, run.explain()
    first, second = run.report()["attempts"]
    cause = first["root_cause"]
    assert ("killed", rank, "SIGKILL") == (cause["kind"], cause["rank"], cause["signal"])
    assert [None, resume_step] == [e["resume_step"] for e in run.events("attempt_started")]
    assert resume_step == second["resume_step"]
    return dict(second)


def assert_one_attempt_from_scratch(run: Finished) -> None:
    """``run`` succeeded in one attempt that started from no checkpoint."""
    assert 0 == run.returncode, run.explain()
    assert [None] == [e["resume_step"] for e in run.events("attempt_started")]


# MaxText (examples/maxtext/README.md): a tiny decoder on synthetic data, Orbax every 10 steps. The
# recipe's command carries each override (tests/frameworks/test_maxtext.py checks it). `hardware`
# and `jax_cache_dir` (MaxText's default is ~/jax_cache) are each test's own.
MAXTEXT_TINY = (
    "dataset_type=synthetic", "checkpoint_period=10", "async_checkpointing=false",
    "base_emb_dim=64", "base_num_query_heads=2", "base_num_kv_heads=2", "base_mlp_dim=128",
    "base_num_decoder_layers=2", "head_dim=32", "vocab_size=256", "max_target_length=64",
    "per_device_batch_size=1", "dtype=float32", "attention=dot_product", "enable_tensorboard=false",
    "log_period=10",
)
# Each step MaxText logs, one step late: "completed step: N, seconds: ..., total_weights: W, ...".
MAXTEXT_STEP = re.compile(r"completed step: (\d+),.* total_weights: (\d+)")


# XLA's CPU compiler at its lowest optimisation, for the tests only: MaxText's start-up on CPU is
# mostly compiling its init and train step (each rank compiles both: JAX's persistent cache keys a
# CPU executable by its process, and only process 0 writes the cache), and the tiny model's steps
# need no optimised code. The command line is the recipe's, unchanged.
MAXTEXT_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


def maxtext_env(**extra: str) -> dict[str, str]:
    """:func:`launcher_env` for MaxText's CPU ranks (JAX on CPU, XLA's quick compile), plus ``extra``."""
    return launcher_env(JAX_PLATFORMS="cpu", XLA_FLAGS=MAXTEXT_XLA_FLAGS, **extra)


def maxtext_command(python: Path, out: Path, name: str, steps: int, hardware: str = "cpu",
                    jax_cache_dir: Path | None = None) -> list[object]:
    """MaxText's own pre-training command line, writing under ``out/name`` (checkpoints in
    ``out/name/checkpoints``), its JAX cache in ``jax_cache_dir`` (``out/jax_cache`` unless given)."""
    cache = out / "jax_cache" if jax_cache_dir is None else jax_cache_dir
    return [python, "-m", "maxtext.trainers.pre_train.train", f"run_name={name}", f"base_output_directory={out}",
            f"steps={steps}", f"hardware={hardware}", *MAXTEXT_TINY, f"jax_cache_dir={cache}"]


def maxtext_steps(log: str) -> list[tuple[int, int]]:
    """(step, total_weights) of each step MaxText logged in ``log``."""
    return [(int(step), int(weights)) for step, weights in MAXTEXT_STEP.findall(log)]
