"""``elastic`` on the command line: argv to config, run, report to exit status."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

from elastic.backend import Backend, BackendUnavailable
from elastic.backends.local import LocalBackend
from elastic.backends.ray_address import embeds_ray
from elastic.checkpoint import CheckpointDirError, find_latest
from elastic.commands import show_logs, show_stacks, show_status, write_stdout
from elastic.config import (
    ConfigError,
    LogFormat,
    RunConfig,
    parse_backoff,
    parse_limit,
    parse_listen_port,
    parse_master_port,
    parse_nnodes,
    parse_nonnegative_int,
    parse_nproc,
    parse_positive_int,
    parse_positive_seconds,
    parse_ranks,
    parse_run_id,
    parse_seconds,
    parse_window,
)
from elastic.console import Console
from elastic.driver import Driver
from elastic.exit_codes import ExitCode
from elastic.gpus import detect_gpus
from elastic.heartbeat import DEFAULT_STARTUP_TIMEOUT_S, HangPolicy, HeartbeatSource
from elastic.journal import JournalError, RunDirectory, RunDirectoryError, read_journal
from elastic.layout import RunLayout
from elastic.log import configure_logging
from elastic.plan import GpuVendor
from elastic.policy import DEFAULT_MAX_PREEMPTIONS, DEFAULT_PREEMPTION_WINDOW_S
from elastic.recovery import PriorRun, prior_run
from elastic.report import summary_lines
from elastic.rules import parse_exit_rule
from elastic.settings import env_settings, file_settings
from elastic.timeline import TimelineError, build_timeline
from elastic.timeline_render import render_html, render_svg

__all__ = ["build_parser", "main"]

_EPILOG = """\
exit status of 'elastic run':
  0        every rank of the last attempt exited 0
  N        the root cause's own status: the failed rank's exit code, or 128+S
           when it died by signal S (a rank SIGKILLed gives 137)
  128+S    the launcher itself was stopped by signal S (SIGTERM: 143, SIGINT: 130)
  2        usage error: bad flags or files, or a named Ray cluster that cannot
           be reached; nothing was launched
  75       fewer nodes than --nnodes MIN came within --node-wait-timeout
  126      launch failure: the command exists but cannot be executed (never retried)
  127      launch failure: the command was not found (never retried)
  70       internal error in elastic itself
"""


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors are one line naming the flag, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.USAGE_ERROR, f"{self.prog}: error: {message}\n")


_Parsed = TypeVar("_Parsed")


def _typed(parse: Callable[[str], _Parsed]) -> Callable[[str], _Parsed]:
    """Turn a parser's ValueError into the message argparse prints after the flag."""

    def convert(text: str) -> _Parsed:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    convert.__name__ = parse.__name__
    return convert


def build_parser() -> argparse.ArgumentParser:
    return _build_parsers()[0]


def _build_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The ``elastic`` parser and its ``run`` subparser."""
    parser = _OneLineParser(
        prog="elastic",
        description="A fault-tolerant launcher for distributed training.",
    )
    commands = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="launch a training command and keep it running through failures",
        usage="elastic run [options] -- COMMAND [ARGS...]\n"
        "       elastic run [options] SCRIPT.py [ARGS...]",
        description=(
            "Launch COMMAND once per process (rank), supervise the ranks, and restart the "
            "whole group when one fails. Give the command after '--' "
            "(elastic run [options] -- python train.py --lr 3e-4), or give a Python "
            "script, which runs with this Python (elastic run [options] train.py --lr 3e-4)."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--config", type=Path, default=None, metavar="FILE.toml",
        help="read options from a TOML file (keys are option names, e.g. max-restarts = 3, "
             "and command = [...]); precedence: command line > ELASTIC_<OPTION> variables "
             "(ELASTIC_MAX_RESTARTS=3) > file > defaults",
    )
    run.add_argument(
        "--nproc-per-node", type=_typed(parse_nproc), default=None, metavar="N|auto",
        help="ranks per node; 'auto' is the node's number of GPUs, or 1 without GPUs "
             "(default: auto)",
    )
    run.add_argument(
        "--max-restarts", type=_typed(parse_nonnegative_int), default=0, metavar="N",
        help="restarts allowed after failures (exits, crashes, kills); outside SIGTERMs "
             "(preemptions) have their own budget of at most 10 restarts in any 60 s "
             "(default: 0)",
    )
    run.add_argument(
        "--restart-window", type=_typed(parse_window), default=None, metavar="SECONDS|run",
        help="count --max-restarts over a sliding window of this many seconds (Erlang-style "
             "restart intensity) instead of the whole run (default: run)",
    )
    run.add_argument(
        "--max-preemptions", type=_typed(parse_limit), default=DEFAULT_MAX_PREEMPTIONS,
        metavar="N|unlimited",
        help="restarts allowed after preemptions (outside SIGTERMs, lost nodes) within "
             f"--preemption-window (default: {DEFAULT_MAX_PREEMPTIONS})",
    )
    run.add_argument(
        "--preemption-window", type=_typed(parse_window), default=DEFAULT_PREEMPTION_WINDOW_S,
        metavar="SECONDS|run",
        help=f"window of --max-preemptions (default: {DEFAULT_PREEMPTION_WINDOW_S:g})",
    )
    run.add_argument(
        "--on-exit", type=_typed(parse_exit_rule), action="append", default=[], metavar="SPEC",
        help="a rule for how ranks end, first match wins, repeatable: CODE, FIRST-LAST or a "
             "signal name, '=', then restart (counted), restart-free (not counted) or fail; "
             "e.g. --on-exit 2=fail --on-exit 75=restart-free --on-exit SIGKILL=restart",
    )
    run.add_argument(
        "--backoff", type=_typed(parse_backoff), default=(1.0, 60.0), metavar="INITIAL:MAX",
        help="wait between restarts that follow no progress: exponential from INITIAL, with "
             "jitter, capped at MAX seconds; the first restart after progress is immediate "
             "(default: 1:60)",
    )
    run.add_argument(
        "--checkpoint-dir", type=Path, default=None, metavar="DIR",
        help="where the job writes checkpoints; before each attempt the latest complete one is "
             "found and handed to the ranks (ELASTIC_RESUME_FROM, {resume_from} in COMMAND)",
    )
    run.add_argument(
        "--max-no-progress", type=_typed(parse_positive_int), default=None, metavar="K",
        help="stop the run (exit status 76, a crash loop) after K attempts in a row that end "
             "without a newer checkpoint; needs --checkpoint-dir (default: off)",
    )
    run.add_argument(
        "--grace-period", type=_typed(parse_seconds), default=30.0, metavar="SECONDS",
        help="time ranks get between the stop signal and SIGKILL (default: 30)",
    )
    run.add_argument(
        "--heartbeat-timeout", type=_typed(parse_positive_seconds), default=None,
        metavar="SECONDS",
        help="call a rank hung when it shows no sign of life for this long: its node's stacks "
             "are dumped (py-spy), it is killed and the group restarts, charged to "
             "--max-restarts (default: off)",
    )
    run.add_argument(
        "--startup-timeout", type=_typed(parse_positive_seconds), default=None,
        metavar="SECONDS",
        help="with --heartbeat-timeout: how long a rank may take to its first sign of life "
             f"(default: {DEFAULT_STARTUP_TIMEOUT_S:g}, or --heartbeat-timeout if longer)",
    )
    run.add_argument(
        "--heartbeat-source", choices=("api", "output"), default=None,
        help="with --heartbeat-timeout, what is a sign of life: 'api' is a call of "
             "elastic.heartbeat(), 'output' is anything the rank prints (default: api)",
    )
    run.add_argument(
        "--run-id", type=_typed(parse_run_id), default=None, metavar="ID",
        help="name of the run, also TORCHELASTIC_RUN_ID (default: time and a random suffix)",
    )
    run.add_argument(
        "--run-dir", type=Path, default=None, metavar="DIR",
        help="where journal, logs and report go (default: ./elastic-runs/<run-id>)",
    )
    run.add_argument(
        "--backend", choices=("auto", "local", "ray"), default="auto",
        help="where ranks run: 'local' is this machine without Ray; 'ray' runs one node agent "
             "per Ray node; 'auto' picks ray when an address is given (--address or "
             "RAY_ADDRESS) or --nnodes asks for more than one node, else local (default: auto)",
    )
    run.add_argument(
        "--nnodes", type=_typed(parse_nnodes), default=None, metavar="N|MIN:MAX",
        help="nodes to run on (ray backend): start once MIN are there, use up to MAX, "
             "continue on the survivors while at least MIN remain (default: 1)",
    )
    run.add_argument(
        "--address", default=None, metavar="ADDR",
        help="Ray cluster to join (default: RAY_ADDRESS, then a cluster started with "
             "'ray start' on this machine, then an embedded Ray on loopback)",
    )
    run.add_argument(
        "--node-resource", default=None, metavar="NAME",
        help="use only Ray nodes that have this resource (default: GPU when any node has GPUs, "
             "else every node)",
    )
    run.add_argument(
        "--scale-up", choices=("never", "checkpoint"), default="checkpoint",
        help="when nodes join and fewer than MAX of --nnodes are in use: 'checkpoint' drains "
             "and relaunches at the larger size after the next new checkpoint (needs "
             "--checkpoint-dir; never charged to a budget), 'never' keeps the size "
             "(default: checkpoint)",
    )
    run.add_argument(
        "--scale-up-interval", type=_typed(parse_seconds), default=300.0, metavar="SECONDS",
        help="at most one scale-up per this many seconds (default: 300)",
    )
    run.add_argument(
        "--node-wait-timeout", type=_typed(parse_seconds), default=300.0, metavar="SECONDS",
        help="how long to wait for MIN nodes, at start and after a node is lost (default: 300)",
    )
    run.add_argument(
        "--ranks", type=_typed(parse_ranks), default=None, metavar="LIST",
        help="ranks whose output is echoed on the console: 'all', 'none' or a list "
             "like '0,2-3' (default: all); every rank's output is always in its log file",
    )
    run.add_argument(
        "--log-format", choices=[f.value for f in LogFormat], default=LogFormat.AUTO.value,
        help="launcher events on stderr: 'console' for people, 'json' lines for machines, "
             "'auto' is console on a terminal, else json (default: auto)",
    )
    run.add_argument(
        "--metrics-port", type=_typed(parse_listen_port), default=None, metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port, "
             "journaled as metrics_serving) (default: off)",
    )
    run.add_argument(
        "--metrics-host", default="127.0.0.1", metavar="HOST",
        help="address the metrics endpoint binds (default: 127.0.0.1, this machine only)",
    )
    run.add_argument(
        "--no-status", action="store_true",
        help="no live status line at the bottom of the terminal (it is shown only when "
             "stdout and stderr are a terminal)",
    )
    run.add_argument(
        "--isolate-gpus", action="store_true",
        help="give each rank only its own GPU through CUDA_VISIBLE_DEVICES "
             "(and HIP_VISIBLE_DEVICES on ROCm)",
    )
    run.add_argument(
        "--master-addr", default=None, metavar="ADDR",
        help="MASTER_ADDR for the ranks (default: 127.0.0.1 on one machine)",
    )
    run.add_argument(
        "--master-port", type=_typed(parse_master_port), default=None, metavar="PORT",
        help="MASTER_PORT for the ranks (default: a fresh free port each attempt)",
    )
    run.add_argument("script", nargs="?", help=argparse.SUPPRESS)
    run.add_argument("script_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    status = commands.add_parser(
        "status", help="show phase, attempts, failures and root cause of a run",
        description="Read a run directory's journal and show where the run stands.",
    )
    status.add_argument("run_dir", type=Path, metavar="RUN_DIR")

    report = commands.add_parser(
        "report", help="draw a run's timeline: a self-contained HTML page or an SVG",
        description="Read a run directory's journal and draw its timeline: one lane per node, "
                    "phases, failures, the attempts, the root cause and the goodput.",
    )
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    report.add_argument("--out", type=Path, default=None, metavar="PATH",
                        help="a .html page or a .svg picture (default: RUN_DIR/timeline.html)")

    stack = commands.add_parser(
        "stack", help="dump the live stacks of every rank of a running job (py-spy)",
        description="Print what every rank of a running job is doing now, via py-spy: on Ray "
                    "through the run's node agents, on one machine directly. Needs py-spy "
                    "(pip install 'elastic[debug]').",
    )
    stack.add_argument("run_dir", type=Path, metavar="RUN_DIR")

    logs = commands.add_parser(
        "logs", help="show the ranks' output of a run",
        description="Print the ranks' logs of an attempt (default: the latest), each line "
                    "prefixed [rank R] unless --rank picks one rank.",
    )
    logs.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    logs.add_argument("--rank", type=_typed(parse_nonnegative_int), default=None, metavar="R",
                      help="only this rank, unprefixed")
    logs.add_argument("--attempt", type=_typed(parse_nonnegative_int), default=None, metavar="K",
                      help="this attempt (default: the latest)")
    logs.add_argument("--follow", "-f", action="store_true",
                      help="keep printing new output until the run finishes (Ctrl-C stops)")
    return parser, run


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
    if after_dashes is not None:
        if args.script is not None:
            raise ConfigError("COMMAND", "give the command either after '--' or as a script, not both")
        return tuple(after_dashes)
    if args.script is None:
        return tuple(args.config_command or ())
    if not Path(args.script).is_file():
        raise ConfigError("script", f"{args.script!r} is not a file; to run a program, put it after '--'")
    return (sys.executable, args.script, *args.script_args)


def _backend_name(args: argparse.Namespace, env: dict[str, str]) -> str:
    if args.backend != "auto":
        return str(args.backend)
    many_nodes = args.nnodes is not None and args.nnodes[1] > 1
    return "ray" if args.address or env.get("RAY_ADDRESS") or many_nodes else "local"


def _config_from(
    args: argparse.Namespace,
    command: tuple[str, ...],
    backend: str,
    gpu_ids: tuple[str, ...],
) -> RunConfig:
    min_nodes, max_nodes = args.nnodes or (1, 1)
    if args.max_no_progress is not None and args.checkpoint_dir is None:
        raise ConfigError("--max-no-progress", "needs --checkpoint-dir to see progress")
    nproc = args.nproc_per_node
    if backend == "local":
        if max_nodes > 1:
            raise ConfigError("--nnodes", "more than one node needs the ray backend (--backend ray)")
        nproc = nproc or max(1, len(gpu_ids))
        if args.isolate_gpus and nproc > len(gpu_ids):
            raise ConfigError(
                "--isolate-gpus",
                f"{nproc} ranks per node need {nproc} GPUs, but this machine shows {len(gpu_ids)}",
            )
    run_id = args.run_id or _default_run_id()
    return RunConfig(
        command=command,
        run_id=run_id,
        run_dir=args.run_dir or Path("elastic-runs") / run_id,
        nproc_per_node=nproc,
        max_restarts=args.max_restarts,
        grace_period_s=args.grace_period,
        backend=backend,
        echo_ranks=args.ranks,
        log_format=LogFormat(args.log_format),
        isolate_gpus=args.isolate_gpus,
        master_addr=args.master_addr,
        master_port=args.master_port,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        node_wait_timeout_s=args.node_wait_timeout,
        address=args.address,
        node_resource=args.node_resource,
        on_exit=tuple(args.on_exit),
        restart_window_s=args.restart_window,
        max_preemptions=args.max_preemptions,
        preemption_window_s=args.preemption_window,
        backoff_s=args.backoff,
        max_no_progress=args.max_no_progress,
        checkpoint_dir=args.checkpoint_dir.resolve() if args.checkpoint_dir else None,
        scale_up=args.scale_up == "checkpoint",
        scale_up_interval_s=args.scale_up_interval,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        hang=_hang_policy(args),
    )


def _hang_policy(args: argparse.Namespace) -> HangPolicy | None:
    if args.heartbeat_timeout is None:
        for flag, value in (("--startup-timeout", args.startup_timeout),
                            ("--heartbeat-source", args.heartbeat_source)):
            if value is not None:
                raise ConfigError(flag, "needs --heartbeat-timeout")
        return None
    source = HeartbeatSource(args.heartbeat_source or "api")
    return HangPolicy(args.heartbeat_timeout, args.startup_timeout, source)


def _make_backend(
    config: RunConfig, echo: Callable[[str], None], gpus: tuple[GpuVendor, tuple[str, ...]]
) -> Backend:
    if config.backend == "local":
        assert config.nproc_per_node is not None
        return LocalBackend(
            config.nproc_per_node,
            gpu_vendor=gpus[0],
            gpu_ids=gpus[1],
            echo=echo,
            echo_ranks=config.echo_ranks,
        )
    if embeds_ray(config.address, os.environ):
        # Ray reads this when imported: its embedded processes then bind loopback only.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from elastic.backends.ray import RayBackend  # Ray is imported only when it is used

    return RayBackend(
        address=config.address,
        run_id=config.run_id,
        nproc_per_node=config.nproc_per_node,
        node_resource=config.node_resource,
        echo=echo,
        echo_ranks=config.echo_ranks,
    )


def _run(args: argparse.Namespace, after_dashes: list[str] | None) -> int:
    base_env = dict(os.environ)  # what ranks get: captured before Ray touches os.environ
    gpus = detect_gpus(base_env)
    try:
        command = _resolve_command(args, after_dashes)
        config = _config_from(args, command, _backend_name(args, base_env), gpus[1])
    except ConfigError as error:
        return _usage_error(str(error))
    if config.checkpoint_dir is not None:
        try:
            find_latest(config.checkpoint_dir)
        except CheckpointDirError as error:
            return _usage_error(f"--checkpoint-dir: {error}")
    try:
        run_dir, prior = _open_run_directory(config)
    except (RunDirectoryError, JournalError) as error:
        return _usage_error(f"--run-id: {error}")

    stdout, stderr = Console(sys.stdout.fileno()), Console(sys.stderr.fileno())
    live_status = stdout.isatty and stderr.isatty and not args.no_status
    # On one terminal, events go through the same writer as rank lines and the
    # status line, so the three never cut into each other.
    configure_logging(stdout if live_status else stderr, config.log_format)
    try:
        backend = _make_backend(config, stdout.write, gpus)
        driver = Driver(config, backend, run_dir, base_env=base_env, prior=prior)
        if live_status:
            stdout.show_status(driver.status_text)
        result = driver.run()
    except BackendUnavailable as error:
        stderr.write(f"elastic: error: {error}")
        return ExitCode.USAGE_ERROR
    except Exception:  # a bug in elastic: say so plainly, workers are already torn down
        stderr.write(f"elastic: internal error, please report it:\n{traceback.format_exc()}")
        return ExitCode.INTERNAL_ERROR
    else:
        for line in summary_lines(dict(result.report), str(config.run_dir)):
            (stdout if live_status else stderr).write(line)
        return result.exit_status
    finally:
        run_dir.close()
        stdout.close()
        stderr.close()


def _driver_alive(pid: int | None) -> bool:
    """Whether ``pid`` is a live ``elastic`` process on this host (the run's driver)."""
    if pid is None or pid == os.getpid():
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"elastic" in cmdline


def _open_run_directory(config: RunConfig) -> tuple[RunDirectory, PriorRun | None]:
    """A new run directory, or the one of an earlier driver of this run that died."""
    layout = RunLayout(config.run_dir)
    if not layout.journal.exists():
        return RunDirectory.create(config.run_dir), None
    journal = read_journal(layout.journal)
    prior = prior_run(journal.events, truncated_tail=journal.truncated_tail)
    if prior.finished_outcome is not None:
        raise RunDirectoryError(
            f"run {prior.run_id or config.run_id} in {config.run_dir} already finished "
            f"({prior.finished_outcome}); choose another --run-id or --run-dir"
        )
    if _driver_alive(prior.driver_pid):
        raise RunDirectoryError(
            f"run {prior.run_id or config.run_id} is still being driven by pid {prior.driver_pid}"
        )
    return RunDirectory.reopen(config.run_dir), prior


def _status(args: argparse.Namespace) -> int:
    try:
        lines = show_status(args.run_dir, _driver_alive)
    except JournalError as error:
        return _usage_error(str(error))
    print("\n".join(lines))
    return ExitCode.SUCCESS


def _stack(args: argparse.Namespace) -> int:
    problem = show_stacks(args.run_dir, write_stdout)
    return ExitCode.SUCCESS if problem is None else _usage_error(problem)


def _logs(args: argparse.Namespace) -> int:
    problem = show_logs(
        args.run_dir, rank=args.rank, attempt=args.attempt, follow=args.follow, write=write_stdout
    )
    return ExitCode.SUCCESS if problem is None else _usage_error(problem)


def _report(args: argparse.Namespace) -> int:
    out: Path = args.out or args.run_dir / "timeline.html"
    if out.suffix.lower() not in (".html", ".htm", ".svg"):
        return _usage_error(f"--out: {out} must end in .html or .svg")
    journal_path = RunLayout(args.run_dir).journal
    try:
        journal = read_journal(journal_path)
        timeline = build_timeline(journal.events, truncated_tail=journal.truncated_tail)
    except JournalError as error:
        return _usage_error(str(error))
    except TimelineError as error:
        return _usage_error(f"{journal_path}: {error}")
    page = render_svg(timeline) if out.suffix.lower() == ".svg" else render_html(timeline)
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as error:
        return _usage_error(f"--out: cannot write {out}: {error.strerror}")
    print(out)
    return ExitCode.SUCCESS


def _apply_settings(run: argparse.ArgumentParser, options: Sequence[str]) -> None:
    """Make the --config file's and the ELASTIC_* variables' values the run defaults."""
    config_flag = argparse.ArgumentParser(add_help=False)
    config_flag.add_argument("--config", type=Path)
    known, _ = config_flag.parse_known_args(options)
    settings = file_settings(known.config, run) if known.config else {}
    settings.update(env_settings(os.environ, run))
    run.set_defaults(**settings)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    options, after_dashes = _split_command(argv)
    parser, run = _build_parsers()
    run.set_defaults(config_command=None)
    if options[:1] == ["run"]:
        try:
            _apply_settings(run, options[1:])
        except ConfigError as error:
            return _usage_error(str(error))
    args = parser.parse_args(options)
    if args.subcommand == "run":
        return _run(args, after_dashes)
    if args.subcommand == "logs":
        return _logs(args)
    if args.subcommand == "stack":
        return _stack(args)
    if args.subcommand == "report":
        return _report(args)
    return _status(args)
