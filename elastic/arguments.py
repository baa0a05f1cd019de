"""The ``elastic`` command line's grammar: every subcommand, option, default and help text.

``--help`` is generated from here, and the README's option table is checked
against it. Parsing only: what the options mean is :mod:`elastic.cli`'s job.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from elastic.checkpoint_names import parse_checkpoint_pattern
from elastic.config import (
    LogFormat,
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
    parse_timeout,
    parse_window,
)
from elastic.exit_codes import ExitCode
from elastic.heartbeat import DEFAULT_STARTUP_TIMEOUT_S
from elastic.policy import (
    DEFAULT_EXIT_TIMEOUT_S,
    DEFAULT_MAX_PREEMPTIONS,
    DEFAULT_PREEMPTION_WINDOW_S,
    ExitHang,
)
from elastic.rules import parse_exit_rule
from elastic.settings import env_settings, file_settings

__all__ = ["OneLineParser", "apply_settings", "build_parser", "build_parsers"]

_EPILOG = """\
exit status of 'elastic run':
  0        every rank of the last attempt exited 0, or those killed hung at exit
           had said they finished (elastic.heartbeat(done=True)), or
           --exit-hang succeed
  N        the root cause's own status: the failed rank's exit code, or 128+S
           when it died by signal S (a rank SIGKILLed gives 137)
  128+S    the launcher itself was stopped by signal S (SIGTERM: 143, SIGINT: 130)
  2        usage error: bad flags or files, or a named Ray cluster that cannot
           be reached; nothing was launched
  75       fewer nodes than --nnodes MIN came within --node-wait-timeout
  126      launch failure: the command exists but cannot be executed (never retried)
  127      launch failure: the command was not found (never retried)
  74       a file of the run directory could not be written (a full disk) before
           the outcome was known; the message names the file
  70       internal error in elastic itself
"""


class OneLineParser(argparse.ArgumentParser):
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


class _Repeatable(argparse._AppendAction):  # argparse has no public base for append
    """A repeatable flag whose command-line items replace the file's or environment's list.

    Plain ``append`` adds the command line's items after the default, so an
    ``ELASTIC_ON_EXIT`` rule would be tried before, and beat, ``--on-exit``.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, self.dest, None) is self.default:
            setattr(namespace, self.dest, [])  # first use on the command line: start afresh
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> argparse.ArgumentParser:
    """The ``elastic`` parser, with defaults as shipped (no config file, no environment)."""
    return build_parsers()[0]


def build_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The ``elastic`` parser and its ``run`` subparser."""
    parser = OneLineParser(
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
             "(ELASTIC_MAX_RESTARTS=3) > file > defaults, for repeatable options too (the "
             "command line's list replaces the others); --run-id and --checkpoint-dir read "
             "ELASTIC_OPTION_RUN_ID and ELASTIC_OPTION_CHECKPOINT_DIR, since ELASTIC_RUN_ID and "
             "ELASTIC_CHECKPOINT_DIR are set in ranks",
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
        "--on-exit", type=_typed(parse_exit_rule), action=_Repeatable, default=[], metavar="SPEC",
        help="a rule for how ranks end, first match wins, repeatable: CODE, FIRST-LAST or a "
             "signal name, '=', then restart (counted), restart-free (not counted) or fail; "
             "e.g. --on-exit 2=fail --on-exit 75=restart-free --on-exit SIGKILL=restart; "
             "exit codes 129-192 are read as signals, so write SIGKILL=fail, not 137=fail",
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
        "--checkpoint-pattern", type=_typed(parse_checkpoint_pattern), default=None, metavar="REGEX",
        help="with --checkpoint-dir: what a checkpoint's name looks like, a regular expression "
             "matched against whole names with a named group for the step, e.g. "
             "'weights-(?P<step>[0-9]+)\\.pt'; it replaces the built-in names (step_100, "
             "checkpoint-100, ckpt_100.pt, epoch=0-step=100.ckpt, last.ckpt, ...) (default: built-in)",
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
        "--exit-timeout", type=_typed(parse_timeout), default=DEFAULT_EXIT_TIMEOUT_S,
        metavar="SECONDS|none",
        help="once a rank has exited 0, call ranks still running this long afterwards "
             "exit-hung: their stacks are dumped and they are killed; 'none' lets them run "
             f"on forever (default: {DEFAULT_EXIT_TIMEOUT_S:g})",
    )
    run.add_argument(
        "--exit-hang", choices=[h.value for h in ExitHang], default=ExitHang.RESTART.value,
        help="what an exit hang of ranks that never said they finished "
             "(elastic.heartbeat(done=True)) amounts to: 'restart' is a failure, charged to "
             "--max-restarts, and the group restarts from the latest checkpoint; 'succeed' "
             "takes a peer's exit 0 as proof the job finished (default: restart)",
    )
    run.add_argument(
        "--run-id", type=_typed(parse_run_id), default=None, metavar="ID",
        help="name of the run, also TORCHELASTIC_RUN_ID; rerunning a run whose driver died "
             "continues it (default: time and a random suffix)",
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


def apply_settings(run: argparse.ArgumentParser, options: Sequence[str]) -> None:
    """Make the --config file's and the ELASTIC_* variables' values the run defaults."""
    config_flag = argparse.ArgumentParser(add_help=False)
    config_flag.add_argument("--config", type=Path)
    known, _ = config_flag.parse_known_args(options)
    settings = file_settings(known.config, run) if known.config else {}
    settings.update(env_settings(os.environ, run))
    run.set_defaults(**settings)
