"""The ``elastic`` command line's grammar: every subcommand, option, default and help text.

The options of ``elastic run`` come from the option table
(:mod:`elastic.core.options.table`); this module turns each row into a flag. Parsing only:
what the options mean is :mod:`elastic.cli.entry`'s job.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from elastic.core.exit_codes import ExitCode
from elastic.core.options.table import OPTIONS, Option, help_text, option
from elastic.cli.layering import env_settings, file_settings
from elastic.cli.suggest import nearest
from elastic.cli.torchrun import FLAGS as TORCHRUN_FLAGS
from elastic.cli.torchrun import TorchrunFlag
from elastic.core.options.values import parse_nonnegative_int, parse_run_id

__all__ = ["OneLineParser", "apply_settings", "build_parser", "build_parsers", "parse", "underscored"]

_EPILOG = """\
exit status of 'elastic run':
  0        every rank of the last attempt exited 0, or those killed hung at exit
           had finished (they said so with elastic.heartbeat(done=True), or
           their stack or silence showed it), or --exit-hang succeed
  N        the root cause's own status: the failed rank's exit code, or 128+S
           when it died by signal S (a rank SIGKILLed gives 137)
  128+S    the launcher itself was stopped by signal S (SIGTERM: 143, SIGINT: 130);
           a rerun with the same --run-id continues it
  2        usage error: bad flags or files, or a named Ray cluster that cannot
           be reached; nothing was launched
  75       requeue me: fewer nodes than --nnodes MIN came within
           --node-wait-timeout, Ray was lost, or a preemption notice ended the
           run once the ranks saved; a rerun with the same --run-id continues it
  76       crash loop: --max-no-progress attempts in a row without a newer
           checkpoint
  126      launch failure: the command exists but cannot be executed (never retried)
  127      launch failure: the command was not found (never retried)
  74       a file of the run directory could not be written (a full disk) before
           the outcome was known; the message names the file
  73       another live launcher drives this run (it holds the run directory's
           lock); nothing was done
  70       internal error in elastic itself
  A rank's own status passes through as it is, 2 among them: docs/reference/exit-status.md

more in the repository's docs/ (a mkdocs site; each page is Markdown):
  docs/reference/command-line.md   every option, with the sections that explain them
  docs/reference/config-file.md    --config FILE.toml and ELASTIC_<OPTION> variables
  docs/reference/torchrun.md       torchrun's flags and how each is taken
  docs/failures/index.md           what happens when a rank dies, hangs, stalls, is preempted
"""

_TOP_EPILOG = """\
start here (in the repository's docs/, a mkdocs site; each page is Markdown):
  docs/getting-started/one-machine.md   the demo, a hang, a failure; status, logs, report
  docs/failures/index.md                what happens when a rank dies, hangs, stalls, is preempted
  docs/reference/command-line.md        every option of 'elastic run' (also: elastic run --help)
  docs/operating/troubleshooting.md     what people run into, and where the answer is
"""


class OneLineParser(argparse.ArgumentParser):
    """Usage errors are one line naming the flag, exit status 2.

    A flag is taken only by its whole name: argparse's prefixes (``--max-restart`` for
    ``--max-restarts``) would let a flag added later change what an old command line means.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        self.commands: dict[str, OneLineParser] = {}  # the subcommands' parsers, by name
        self.long_flags: list[str] = []  # every --flag it takes, hidden spellings too
        super().__init__(*args, **kwargs)  # adds --help

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.long_flags.extend(flag for flag in action.option_strings if flag.startswith("--"))
        return action

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.USAGE_ERROR, f"{self.prog}: error: {message}\n")


def parse(parser: OneLineParser, argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed; a flag no parser takes is a usage error naming the nearest one there is."""
    args, extras = parser.parse_known_args(argv)
    if not extras:
        return args
    command = parser.commands.get(getattr(args, "subcommand", None) or "", parser)
    flag = next((word.partition("=")[0] for word in extras if word.startswith("-")), None)
    if flag is None:
        command.error(f"unrecognized arguments: {' '.join(extras)}")
    near = nearest(flag, command.long_flags)
    if near is not None:
        command.error(f"unknown option {flag}; did you mean {near}?")
    command.error(f"unknown option {flag} ({command.prog} --help lists them)")


def underscored(flag: str) -> str:
    """``--max-restarts`` -> ``--max_restarts``: the spelling torchrun and ``--config`` keys also take."""
    return "--" + flag[2:].replace("-", "_")


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


class _Repeatable(argparse.Action):
    """A repeatable flag whose command-line items replace the file's or environment's list.

    argparse's ``append`` adds the command line's items after the default, so an
    ``ELASTIC_ON_EXIT`` rule would be tried before, and beat, ``--on-exit``.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        items = getattr(namespace, self.dest, None)
        earlier = [] if items is None or items is self.default else list(items)  # first use: afresh
        setattr(namespace, self.dest, [*earlier, values])


def _add(run: OneLineParser, row: Option) -> None:
    """The flag of one row of the option table, and its spelling with ``_`` (hidden from --help)."""
    default = list(row.default) if row.repeat else row.default  # one list: _Repeatable knows it
    spellings = {row.flag: help_text(row)}
    spellings.setdefault(underscored(row.flag), argparse.SUPPRESS)  # none for --config
    for flag, shown in spellings.items():
        _add_spelling(run, row, flag, shown, default)


def _add_spelling(run: OneLineParser, row: Option, flag: str, shown: str, default: Any) -> None:
    """``flag`` as one spelling of ``row``'s option: its values, its default, its place."""
    if row.value is None:
        names = (row.short, flag) if row.short and flag == row.flag else (flag,)  # -v with --verbose only
        run.add_argument(*names, dest=row.dest, action="store_true", help=shown)
    elif row.choices:
        run.add_argument(flag, dest=row.dest, choices=row.choices, default=row.default, help=shown)
    else:
        run.add_argument(
            flag, dest=row.dest, type=_typed(row.read), default=default,
            action=_Repeatable if row.repeat else "store", metavar=row.metavar, help=shown,
        )


def _add_torchrun(run: OneLineParser, flag: TorchrunFlag) -> None:
    """One of torchrun's flags, hidden from --help (docs/reference/torchrun.md has them all)."""
    if flag.option is not None:  # one of elastic's options, under torchrun's names
        row = option(flag.option)
        for spelling in flag.spellings:
            if spelling not in run.long_flags:  # --max_restarts is elastic's own spelling too
                _add_spelling(run, row, spelling, argparse.SUPPRESS, row.default)
    elif flag.switch:
        run.add_argument(*flag.spellings, dest=flag.dest, action="store_true", help=argparse.SUPPRESS)
    else:
        read: Callable[[str], object] = str
        if flag.dest == "node_rank":
            read = _typed(parse_nonnegative_int)
        elif flag.dest == "rdzv_id":  # refused by its own name, as typed
            read = _typed(parse_run_id)
        run.add_argument(
            *flag.spellings, dest=flag.dest, type=read, default=None, metavar=flag.metavar,
            help=argparse.SUPPRESS,
        )


def _add_runs_dir(command: OneLineParser) -> None:
    for flag, shown in (("--runs-dir", "the folder of runs, where a run id is looked up (default: "
                                       "ELASTIC_RUNS_DIR, else ./elastic-runs)"),
                        ("--runs_dir", argparse.SUPPRESS)):
        command.add_argument(flag, dest="runs_dir", type=Path, default=None, metavar="RUNS_DIR", help=shown)


def _add_run(command: OneLineParser) -> None:
    """The run a reading subcommand reads: RUN, and the folder of runs it is looked up in."""
    command.add_argument(
        "run", nargs="?", default=None, metavar="RUN",
        help="a run directory, or a run's id in the folder of runs (default: the latest run there)",
    )
    _add_runs_dir(command)


def build_parser() -> OneLineParser:
    """The ``elastic`` parser, with defaults as shipped (no config file, no environment)."""
    return build_parsers()[0]


def build_parsers() -> tuple[OneLineParser, OneLineParser]:
    """The ``elastic`` parser and its ``run`` subparser."""
    parser = OneLineParser(
        prog="elastic",
        description="A fault-tolerant launcher for distributed training.",
        epilog=_TOP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="launch a training command and keep it running through failures",
        usage="elastic run [options] -- COMMAND [ARGS...]\n"
        "       elastic run [options] SCRIPT.py [ARGS...]\n"
        "       elastic run [options] -m MODULE [ARGS...]",
        description=(
            "Launch COMMAND once per process (rank), supervise the ranks, and restart the "
            "whole group when one fails. Give the command after '--' "
            "(elastic run [options] -- python train.py --lr 3e-4), or give a Python "
            "script, which runs with this Python (elastic run [options] train.py --lr 3e-4). "
            "torchrun's command lines work too: its flags (--nproc_per_node 2, --standalone, "
            "-m MODULE, --rdzv-backend, ...) are taken as docs/reference/torchrun.md says."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for row in OPTIONS:
        _add(run, row)
    for flag in TORCHRUN_FLAGS:
        _add_torchrun(run, flag)
    run.add_argument("script", nargs="?", help=argparse.SUPPRESS)
    run.add_argument("script_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    status = commands.add_parser(
        "status", help="show phase, attempts, failures and root cause of a run",
        description="Read a run directory's journal and show where the run stands.",
        epilog="See docs/reference/run-directory.md (the journal).",
    )
    _add_run(status)

    report = commands.add_parser(
        "report", help="draw a run's timeline: a self-contained HTML page or an SVG",
        description="Read a run directory's journal and draw its timeline: one lane per node, "
                    "phases, failures, the attempts, the root cause and the goodput.",
        epilog="See docs/operating/goodput.md (timeline, goodput ledger).",
    )
    _add_run(report)
    report.add_argument("--out", type=Path, default=None, metavar="PATH",
                        help="a .html page or a .svg picture (default: timeline.html in the run directory)")
    report.add_argument("--events", type=Path, default=None, metavar="FILE",
                        help="a log of events injected into the run from outside (a failure schedule's "
                             "replayer, a test), one JSON object a line with its time t (Unix seconds or "
                             "ISO 8601), kind, target and cause: each is marked on the timeline, placed "
                             "in its attempt, and listed on stdout with what elastic saw after it")

    stack = commands.add_parser(
        "stack", help="dump the live stacks of every rank of a running job (py-spy)",
        description="Print what every rank of a running job is doing now, via py-spy: on Ray "
                    "through the run's node agents, on one machine directly. Native frames are "
                    "included where py-spy can take them (else the Python frames, saying why), "
                    "and each rank's dump starts with where its main thread is. Needs py-spy "
                    "(pip install 'elastic-launch[debug]').",
        epilog="See docs/failures/hangs.md (stack dumps, ptrace).",
    )
    _add_run(stack)

    logs = commands.add_parser(
        "logs", help="show the ranks' output of a run",
        description="Print the ranks' logs of an attempt (default: the latest), each line "
                    "prefixed [rank R] unless --rank picks one rank.",
        epilog="See docs/reference/run-directory.md (rank logs).",
    )
    _add_run(logs)
    logs.add_argument("--rank", type=_typed(parse_nonnegative_int), default=None, metavar="R",
                      help="only this rank, unprefixed")
    logs.add_argument("--attempt", type=_typed(parse_nonnegative_int), default=None, metavar="K",
                      help="this attempt (default: the latest)")
    logs.add_argument("--follow", "-f", action="store_true",
                      help="keep printing new output until the run finishes, or until its driver is "
                           "found dead (then says how to continue; Ctrl-C stops)")
    runs = commands.add_parser(
        "runs", help="list the runs in the folder of runs, newest first",
        description="One line a run of the folder of runs (--runs-dir, ELASTIC_RUNS_DIR, else "
                    "./elastic-runs), the newest first: its id, start, state, attempts, exit status "
                    "and root cause.",
        epilog="See docs/reference/command-line.md (the folder of runs).",
    )
    _add_runs_dir(runs)
    parser.commands = dict(commands.choices)
    return parser, run


def apply_settings(run: argparse.ArgumentParser, options: Sequence[str]) -> None:
    """Make the --config file's and the ELASTIC_* variables' values the run defaults.

    The file is the ``--config`` among elastic's own options, read with the run parser
    itself: a script's own ``--config``, after the script's name, is the script's.
    """
    known, _ = run.parse_known_args(options)
    settings = file_settings(known.config) if known.config else {}
    settings.update(env_settings(os.environ))
    run.set_defaults(**settings)
