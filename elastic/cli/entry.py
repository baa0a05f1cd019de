"""``elastic`` on the command line: argv to config, run, report to exit status."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
import traceback
from dataclasses import replace
from datetime import datetime, timezone
from collections.abc import Callable, Sequence
from pathlib import Path

from elastic.cli import torchrun
from elastic.cli.rdzv_ids import RdzvRun, run_of
from elastic.cli.finding import RunNotFound, find_run, list_runs, runs_folder
from elastic.cli.grammar import apply_settings, build_parsers, parse
from elastic.backends.protocol import Backend, BackendUnavailable
from elastic.backends.local import LocalBackend
from elastic.backends.ray.cluster.address import embeds_ray
from elastic.run.watches.checkpoint_scan import CheckpointDirError, scan_checkpoints
from elastic.cli.subcommands import show_logs, show_stacks, show_status, write_stdout
from elastic.core.options.config import ConfigError, RunConfig
from elastic.run.console.writer import Console
from elastic.run.console.events import Verbosity
from elastic.run.console.live_status import REDRAW_EVERY_S, LiveStatus
from elastic.run.driver import Driver
from elastic.core.exit_codes import ExitCode
from elastic.core.journal.fold import FoldError
from elastic.core.labels import plural
from elastic.node.probes.gpus import detect_gpus
from elastic.node.probes.writable import write_problem
from elastic.node.spawner.kept import KeepTerms, recorded_generation
from elastic.core.takeover.generations import next_generation
from elastic.core.takeover.lease import Lease
from elastic.worker.heartbeat import HangPolicy, HeartbeatSource
from elastic.run.records.journal import (
    JournalError,
    RunDirectory,
    RunDirectoryError,
    RunDirectoryLocked,
    RunWriteError,
    driver_running,
    last_step_seen,
    longest_init_marked,
    read_journal,
)
from elastic.core.run_layout import RunLayout
from elastic.run.console.log import configure_logging
from elastic.run.records.metrics import MetricsServer, bind_metrics
from elastic.core.options.table import OPTIONS, InRunDir
from elastic.core.launch.plan import GpuVendor
from elastic.core.journal.recovery import PriorRun, prior_run
from elastic.views.report import summary_lines
from elastic.run.held_notices import EARLY_NOTICE_SIGNAL, hold_notices, ignore_after_run, release_notice
from elastic.core.journal.injected import InjectedLogError, InjectedMark, injected_lines, place_injected, read_injected
from elastic.core.journal.timeline import TimelineError, build_timeline
from elastic.core.training.stall import ProgressPolicy
from elastic.views.runs import runs_table
from elastic.views.timeline_html import render_html, render_svg

__all__ = ["main"]


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Options before ``--`` and the command after it (``None`` when there is no ``--``)."""
    if "--" not in argv:
        return list(argv), None
    index = list(argv).index("--")
    return list(argv[:index]), list(argv[index + 1 :])


def _usage_error(message: str) -> int:
    print(f"elastic: error: {message}", file=sys.stderr)
    return ExitCode.USAGE_ERROR


def _default_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _resolve_command(args: argparse.Namespace, after_dashes: list[str] | None) -> tuple[str, ...]:
    """The ranks' command: after ``--``, or a script run with this Python, or, as torchrun
    takes them, a module (``-m MODULE``) or a program (``--no-python PROGRAM``)."""
    if args.module and args.no_python:
        raise ConfigError("-m", "give -m MODULE or --no-python PROGRAM, not both")
    if args.module and (after_dashes is not None or args.script is None):
        raise ConfigError("-m", "needs the module's name after the options: elastic run [options] -m MODULE [ARGS...]")
    if after_dashes is not None:
        if args.script is not None:
            raise ConfigError("COMMAND", "give the command either after '--' or as a script, not both")
        return tuple(after_dashes)
    if args.script is None:
        return tuple(args.config_command or ())
    if args.module:
        return (sys.executable, "-m", args.script, *args.script_args)
    if args.no_python:
        return (args.script, *args.script_args)
    if not Path(args.script).is_file():
        raise ConfigError(
            "script", f"{args.script!r} is not a file; to run a program, put it after '--' "
            "(or give --no-python), and a module with -m MODULE"
        )
    return (sys.executable, args.script, *args.script_args)


def _backend_name(args: argparse.Namespace, env: dict[str, str]) -> str:
    if args.standalone:  # torchrun's: this machine alone
        if args.nnodes[1] > 1:
            raise ConfigError("--standalone", f"runs on this machine alone, but --nnodes asks for up to {args.nnodes[1]}")
        return "local" if args.backend == "auto" else str(args.backend)
    if args.backend != "auto":
        return str(args.backend)
    many_nodes = args.nnodes is not None and args.nnodes[1] > 1
    return "ray" if args.address or env.get("RAY_ADDRESS") or many_nodes else "local"


def _nodes_problem(config: RunConfig, env: dict[str, str]) -> str | None:
    """Why ``--nnodes`` can never be met, or ``None``: more than one node with no Ray cluster to join.

    elastic then starts a Ray of its own, which listens on loopback only: no other machine can
    ever join it, so waiting ``--node-wait-timeout`` and advising a rerun would only waste both.
    """
    if config.backend != "ray" or config.min_nodes <= 1 or not embeds_ray(config.address, env):
        return None
    return (
        f"{config.min_nodes} nodes needed, but no Ray cluster runs here (no --address, RAY_ADDRESS or "
        "`ray start`), and the Ray elastic would start listens on this machine only: no other node "
        "can ever join it; start a Ray cluster the other machines join (`ray start --head` here, "
        "`ray start --address HOST:6379` on each of them) and run this again, or use --nnodes 1"
    )


def _config_from(
    args: argparse.Namespace,
    command: tuple[str, ...],
    backend: str,
    gpu_ids: tuple[str, ...],
    rdzv: RdzvRun | None = None,
) -> RunConfig:
    """The options set as is (``field=`` in the option table), and those composed here;
    ``rdzv``: the run torchrun's ``--rdzv-id`` names."""
    min_nodes, max_nodes = args.nnodes
    nproc = args.nproc_per_node
    if backend == "local":
        if max_nodes > 1:
            raise ConfigError(
                "--nnodes", "more than one node needs the ray backend (--backend ray) and a Ray cluster "
                "the other machines join; use --nnodes 1 for this machine alone"
            )
        nproc = nproc or max(1, len(gpu_ids))
        if args.isolate_gpus and nproc > len(gpu_ids):
            raise ConfigError(
                "--isolate-gpus",
                f"{plural(nproc, 'rank')} per node need {plural(nproc, 'GPU')}, but this machine shows {len(gpu_ids)}",
            )
    run_id = rdzv.run_id if rdzv is not None else args.run_id or _default_run_id()
    as_is = {row.field: row.to_field(getattr(args, row.dest)) for row in OPTIONS if row.field}
    # Absolute, like every path handed to ranks: a rank that changes directory, or runs
    # on a node with another working directory, still finds its log and error files.
    run_dir = (args.run_dir or args.runs_dir / run_id).resolve()
    cache_dir = run_dir / "cache" if args.cache_dir is InRunDir.CACHE else args.cache_dir
    return RunConfig(
        command=command,
        run_id=run_id,
        run_dir=run_dir,
        nproc_per_node=nproc,
        backend=backend,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        checkpoint_dir=args.checkpoint_dir.resolve() if args.checkpoint_dir else None,
        cache_dir=cache_dir.resolve() if cache_dir else None,
        torchelastic_run_id=rdzv.typed if rdzv is not None and rdzv.typed != run_id else None,
        hang=_hang_policy(args),
        progress=_progress_policy(args),
        **as_is,
    )


def _hang_policy(args: argparse.Namespace) -> HangPolicy | None:
    if args.heartbeat_timeout is None:
        for flag, value in (("--startup-timeout", args.startup_timeout),
                            ("--heartbeat-source", args.heartbeat_source)):
            if value is not None:
                raise ConfigError(flag, "needs --heartbeat-timeout")
        return None
    source = HeartbeatSource(args.heartbeat_source or HeartbeatSource.API.value)
    return HangPolicy(args.heartbeat_timeout, args.startup_timeout, source)


def _progress_policy(args: argparse.Namespace) -> ProgressPolicy:
    """``--progress-pattern``, ``--stall-timeout`` and ``--stall-floor`` (each already validated)."""
    pattern = args.progress_pattern
    timeout = args.stall_timeout
    return ProgressPolicy(
        pattern=None if pattern in (None, "none") else pattern,
        read_output=pattern != "none",
        stall_auto=timeout == "auto",
        stall_timeout_s=None if timeout in ("auto", "none") else float(timeout),
        stall_floor_s=float(args.stall_floor),
        checkpoint_dir=str(args.checkpoint_dir.resolve()) if args.checkpoint_dir else None,
    )


def _keep_terms(config: RunConfig) -> KeepTerms | None:
    """What the spawners keep for ``--orphan-lease`` (None: nothing): the driver's generation is
    one above the one its run's keeper record names (a dead driver's, when this one takes over)."""
    if config.orphan_lease_s <= 0:
        return None
    record = RunLayout(config.run_dir).keeper_record
    return KeepTerms(Lease(config.orphan_lease_s, config.grace_period_s), record, config.run_id,
                     next_generation([recorded_generation(record)]))


def _make_backend(
    config: RunConfig,
    echo: Callable[[str], None],
    gpus: tuple[GpuVendor, tuple[str, ...]],
    prior: PriorRun | None = None,
) -> Backend:
    if config.backend == "local":
        assert config.nproc_per_node is not None
        return LocalBackend(
            config.nproc_per_node,
            gpu_vendor=gpus[0],
            gpu_ids=gpus[1],
            echo=echo,
            echo_ranks=config.echo_ranks,
            keep=_keep_terms(config),
        )
    if embeds_ray(config.address, os.environ):
        # Ray reads this when imported: its embedded processes then bind loopback only.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from elastic.backends.ray.backend import RayBackend  # Ray is imported only when it is used

    return RayBackend(
        address=config.address,
        run_id=config.run_id,
        run_dir=config.run_dir,
        nproc_per_node=config.nproc_per_node,
        node_resource=config.node_resource,
        echo=echo,
        echo_ranks=config.echo_ranks,
        node_names=prior.node_names if prior is not None else None,  # the run's nodes keep their names
    )


def _run(args: argparse.Namespace, after_dashes: list[str] | None) -> int:
    base_env = dict(os.environ)  # what ranks get: captured before Ray touches os.environ
    if args.verbose and args.quiet:
        return _usage_error("--quiet: give --verbose (-v) or --quiet (-q), not both")
    gpus = detect_gpus(base_env)
    try:
        if (refused := torchrun.refusal(args)) is not None:
            raise refused
        command = _resolve_command(args, after_dashes)
        rdzv = _rdzv_run(args)
        config = _config_from(args, command, _backend_name(args, base_env), gpus[1], rdzv)
    except ConfigError as error:
        return _usage_error(str(error))
    if (problem := _nodes_problem(config, base_env)) is not None:
        return _usage_error(f"--nnodes: {problem}")
    hold_notices(config.notice_signal)  # a notice while starting is kept, not fatal
    if config.notice_signal != EARLY_NOTICE_SIGNAL:
        release_notice(EARLY_NOTICE_SIGNAL)  # held from the first line, but not this run's notice
    if config.checkpoint_dir is not None:
        try:
            scan_checkpoints(config.checkpoint_dir, config.checkpoint_pattern)
        except CheckpointDirError as error:
            return _usage_error(f"--checkpoint-dir: {error}")
        # Found here, not by the first save: that costs two full start-ups and a restart.
        if (problem := write_problem(config.checkpoint_dir)) is not None:
            return _usage_error(f"--checkpoint-dir: {problem}")
    if (problem := _cache_dir_problem(config.cache_dir)) is not None:
        return _usage_error(f"--cache-dir: {problem}")
    # The metrics port is held before the run directory is made: a port in use or a host
    # that resolves nowhere is a usage error, not a run that `elastic status` calls dead.
    try:
        metrics = None if config.metrics_port is None else bind_metrics(config.metrics_host, config.metrics_port)
    except ConfigError as error:
        return _usage_error(str(error))
    for note in torchrun.notes(args):  # once nothing can be refused any more
        print(f"elastic: note: {note}", file=sys.stderr)
    if rdzv is not None and rdzv.after is not None:
        print(f"elastic: note: --rdzv-id {rdzv.typed}: run {rdzv.after[0]} already finished ({rdzv.after[1]}); "
              f"starting run {rdzv.run_id} (the ranks' TORCHELASTIC_RUN_ID is still {rdzv.typed})", file=sys.stderr)
    try:
        return _drive(args, config, gpus, base_env, metrics, "--rdzv-id" if rdzv is not None else "--run-id")
    finally:
        ignore_after_run(config.notice_signal)  # a notice now changes nothing: the exit status stands
        if metrics is not None:
            metrics.close()


def _drive(
    args: argparse.Namespace,
    config: RunConfig,
    gpus: tuple[GpuVendor, tuple[str, ...]],
    base_env: dict[str, str],
    metrics: MetricsServer | None,
    run_flag: str,
) -> int:
    """Open the run directory, run the driver, and say how it ended; ``run_flag``: the flag that
    named the run, as typed (``--run-id``, or torchrun's ``--rdzv-id``)."""
    try:
        run_dir, prior = _open_run_directory(config, run_flag)
    except RunDirectoryLocked as error:  # of two drivers started at once, the one that lost
        print(f"elastic: error: {run_flag}: {error}", file=sys.stderr)
        return ExitCode.RUN_HELD
    except (RunDirectoryError, JournalError) as error:
        return _usage_error(f"{run_flag}: {error}")

    stdout, stderr = Console(sys.stdout.fileno()), Console(sys.stderr.fileno())
    live_status = stdout.isatty and stderr.isatty and not args.no_status
    # On one terminal, events go through the same writer as rank lines and the
    # status line, so the three never cut into each other.
    configure_logging(stdout if live_status else stderr, config.log_format, _verbosity(args),
                      run_dir=str(config.run_dir))
    status: LiveStatus | None = None
    try:
        backend = _make_backend(config, stdout.write, gpus, prior)
        driver = Driver(config, backend, run_dir, base_env=base_env, prior=prior, metrics=metrics)
        if live_status:
            status = LiveStatus(driver.status_text, config.checkpoint_dir, config.checkpoint_pattern)
            status.start()
            stdout.show_status(status.text, REDRAW_EVERY_S)
        result = driver.run()
    except BackendUnavailable as error:
        stderr.write(f"elastic: error: {error}")
        return ExitCode.USAGE_ERROR
    except RunWriteError as error:  # before the outcome was known; the ranks are stopped
        stderr.write(f"elastic: error: {error}; the ranks were stopped")
        return ExitCode.RUN_DIR_UNWRITABLE
    except Exception:  # a bug in elastic: say so plainly, workers are already torn down
        stderr.write(f"elastic: internal error, please report it:\n{traceback.format_exc()}")
        return ExitCode.INTERNAL_ERROR
    else:
        for line in summary_lines(dict(result.report), str(config.run_dir)):
            (stdout if live_status else stderr).write(line)
        return result.exit_status
    finally:
        if status is not None:
            status.stop()
        run_dir.close()
        stdout.close()
        stderr.close()


def _verbosity(args: argparse.Namespace) -> Verbosity:
    """``-v`` every event, ``-q`` only warnings and errors; checked in :func:`_run`."""
    return Verbosity.VERBOSE if args.verbose else Verbosity.QUIET if args.quiet else Verbosity.DEFAULT


def _cache_dir_problem(cache_dir: Path | None) -> str | None:
    """Why the ranks could not keep their compilation caches in ``cache_dir``, or ``None``.

    The folders are made on each node as its ranks start; here only what already exists
    on this machine is checked, so that a read-only or mistyped path fails before launch.
    """
    if cache_dir is None:
        return None
    existing = next((p for p in (cache_dir, *cache_dir.parents) if p.exists()), None)
    if existing is None:
        return None
    if not existing.is_dir():
        return f"{existing} is not a directory; give a directory or 'none'"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable; give a writable directory or 'none'"
    return None


def _rdzv_run(args: argparse.Namespace) -> RdzvRun | None:
    """The run torchrun's ``--rdzv-id`` names (:mod:`elastic.cli.rdzv_ids`), or ``None`` without it."""
    if args.rdzv_id is None:
        return None
    if args.run_id is not None:
        raise ConfigError("--rdzv-id", "give --rdzv-id or --run-id, not both")
    return run_of(args.rdzv_id, None if args.run_dir else args.runs_dir.resolve())


def _open_run_directory(config: RunConfig, run_flag: str = "--run-id") -> tuple[RunDirectory, PriorRun | None]:
    """A new run directory, or the one of an earlier driver of this run that died.

    Whether that driver died is its lock on the run directory (held for its
    lifetime, released by the kernel however it ends), not a guess from pids.
    """
    layout = RunLayout(config.run_dir)
    if not layout.journal.exists():
        return RunDirectory.create(config.run_dir), None
    journal = read_journal(layout.journal)
    try:
        prior = prior_run(journal.events, truncated_tail=journal.truncated_tail)
    except FoldError as error:
        raise journal.unreadable(error) from error
    if not prior.continuable:  # succeeded or failed: only a stopped or "requeue me" run goes on
        raise RunDirectoryError(
            f"run {prior.run_id or config.run_id} in {config.run_dir} already finished "
            f"({prior.finished_outcome}); choose another {run_flag} or --run-dir"
        )
    run_dir = RunDirectory.reopen(config.run_dir)  # RunDirectoryLocked while it lives
    if prior.interrupted is not None:  # how far its attempt trained: its state.json, before ours replaces it
        seen = last_step_seen(layout, prior.interrupted[0], config.progress)
        prior = replace(prior, last_step_seen=None if seen is None else (seen[0], _iso(seen[1])))
    # Its ranks' completed initialisations, journaled or not: --init-timeout auto's window goes on.
    marked = longest_init_marked(layout, prior.next_attempt)
    if marked is not None and (prior.longest_init_s is None or marked > prior.longest_init_s):
        prior = replace(prior, longest_init_s=marked)
    return run_dir, prior


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).isoformat()


def _status(args: argparse.Namespace) -> int:
    try:
        lines = show_status(args.run_dir, lambda _pid: driver_running(args.run_dir))
    except JournalError as error:
        return _usage_error(str(error))
    print("\n".join(lines))
    return ExitCode.SUCCESS


def _stack(args: argparse.Namespace) -> int:
    problem = show_stacks(args.run_dir, write_stdout)
    return ExitCode.SUCCESS if problem is None else _usage_error(problem)


def _logs(args: argparse.Namespace) -> int:
    problem = show_logs(
        args.run_dir, rank=args.rank, attempt=args.attempt, follow=args.follow, write=write_stdout,
        note=lambda line: print(line, file=sys.stderr),
    )
    return ExitCode.SUCCESS if problem is None else _usage_error(problem)


def _runs(folder: Path) -> int:
    rows = list_runs(folder)
    if not rows:
        print(f"no runs in {folder.absolute()}", file=sys.stderr)
        return ExitCode.SUCCESS
    for line in runs_table(rows, datetime.now().astimezone().tzinfo):
        write_stdout(line)
    return ExitCode.SUCCESS


def _report(args: argparse.Namespace) -> int:
    out: Path = args.out or args.run_dir / "timeline.html"
    if out.suffix.lower() not in (".html", ".htm", ".svg"):
        return _usage_error(f"--out: {out} must end in .html or .svg")
    journal_path = RunLayout(args.run_dir).journal
    try:
        journal = read_journal(journal_path)
    except JournalError as error:
        return _usage_error(str(error))
    try:
        timeline = build_timeline(journal.events, truncated_tail=journal.truncated_tail)
    except TimelineError as error:  # the fold's FoldError: names the event's line where it can
        return _usage_error(str(journal.unreadable(error)))
    marks: tuple[InjectedMark, ...] = ()
    if args.events is not None:
        try:
            text = args.events.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            return _usage_error(f"--events: cannot read {args.events}: {getattr(error, 'strerror', None) or error}")
        try:
            marks = place_injected(timeline, read_injected(text, source=str(args.events)))
        except InjectedLogError as error:
            return _usage_error(f"--events: {error}")
    if out.suffix.lower() == ".svg":
        page = render_svg(timeline, injected=marks)
    else:
        page = render_html(timeline, injected=marks)
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as error:
        return _usage_error(f"--out: cannot write {out}: {error.strerror}")
    if args.events is not None:
        for line in injected_lines(marks, str(args.events)):
            write_stdout(line)
    print(out)
    return ExitCode.SUCCESS


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    options, after_dashes = _split_command(argv)
    parser, run = build_parsers()
    run.set_defaults(config_command=None)
    if options[:1] == ["run"]:
        try:
            apply_settings(run, options[1:])
        except ConfigError as error:
            return _usage_error(str(error))
    args = parse(parser, options)
    if args.subcommand == "run":
        return _run(args, after_dashes)
    release_notice(EARLY_NOTICE_SIGNAL)  # no run, no notice: SIGUSR1 does what it did
    folder = runs_folder(args.runs_dir, os.environ)
    if args.subcommand == "runs":
        return _runs(folder)
    try:
        args.run_dir = find_run(args.run, folder)
    except RunNotFound as error:
        return _usage_error(str(error))
    if args.subcommand == "logs":
        return _logs(args)
    if args.subcommand == "stack":
        return _stack(args)
    if args.subcommand == "report":
        return _report(args)
    return _status(args)
