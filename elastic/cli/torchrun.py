"""torchrun's command lines under ``elastic run``: what each of torchrun's flags becomes.

Replacing ``torchrun`` by ``python -m elastic run`` keeps a command line working. Each
flag of torchrun (torch 2.13's ``torch.distributed.run``) is one row of :data:`FLAGS`, with
one of four fates (:class:`Fate`): it is one of elastic's options under torchrun's name; it
is honoured by the wiring of the run (``-m``, ``--no-python``, ``--standalone``); elastic has
no use for it, so it is accepted and one line on stderr says what elastic does instead
(rendezvous is the driver's); or it asks for what elastic cannot do, and is refused saying
why. The table of torchrun's flags in docs/reference/torchrun.md is drawn from the rows
(``python -m elastic.cli.torchrun`` prints it; a test keeps the page equal to it).
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Sequence
from dataclasses import dataclass

from elastic.core.options.values import ConfigError

__all__ = ["FLAGS", "Fate", "TorchrunFlag", "markdown_table", "notes", "refusal"]


class Fate(enum.Enum):
    SAME = "same"  # one of elastic's options: `option` names it
    HONOURED = "honoured"  # read where the run is composed (elastic.cli.entry)
    IGNORED = "ignored"  # accepted; `says` is the line printed when it is given
    REFUSED = "refused"  # a usage error; `says` is why


@dataclass(frozen=True)
class TorchrunFlag:
    """One of torchrun's flags: its spellings, its fate, and what elastic does with it."""

    spellings: tuple[str, ...]  # as torchrun takes them
    fate: Fate
    elastic: str  # what elastic does with it, in Markdown (the docs' table)
    option: str | None = None  # SAME: elastic's flag, whose values it takes
    switch: bool = False  # takes no value
    says: str | None = None  # IGNORED: what elastic does instead; REFUSED: why not
    metavar: str = "VALUE"

    @property
    def name(self) -> str:
        """The spelling messages use: torchrun's long one with dashes (``--tee`` for ``-t``)."""
        return next(spelling for spelling in self.spellings if spelling.startswith("--"))

    @property
    def dest(self) -> str:
        """Where argparse keeps it: elastic's option's for SAME, else its own."""
        if self.option is not None:
            return self.option[2:].replace("-", "_")
        own = self.name[2:].replace("-", "_")
        return own if self.fate is Fate.HONOURED else f"torchrun_{own}"


_RENDEZVOUS = (
    "elastic's driver is the rendezvous: it places every rank and hands out `MASTER_ADDR` and "
    "`MASTER_PORT`; on many nodes, run this command once (through Ray), not on each node"
)
_OUTPUT = (
    "each rank's whole output goes to `RUN_DIR/attempt-K/rank-R.log`, and to the console for "
    "the ranks `--ranks` names"
)

_SAME, _HONOURED, _IGNORED, _REFUSED = Fate.SAME, Fate.HONOURED, Fate.IGNORED, Fate.REFUSED

FLAGS: tuple[TorchrunFlag, ...] = (
    TorchrunFlag(("--nnodes",), _SAME, "`--nnodes`: `N` or `MIN:MAX`; more than one node runs "
                 "through Ray, from this one command", option="--nnodes"),
    TorchrunFlag(("--nproc-per-node", "--nproc_per_node"), _SAME, "`--nproc-per-node`: a number, or "
                 "`auto`, the node's GPUs (torchrun's `auto` on a machine without GPUs is one rank per "
                 "CPU, elastic's is 1); `gpu`, `cpu` and `xpu` are refused", option="--nproc-per-node"),
    TorchrunFlag(("--rdzv-backend", "--rdzv_backend"), _IGNORED, f"ignored, with a note: {_RENDEZVOUS}",
                 says=_RENDEZVOUS, metavar="BACKEND"),
    TorchrunFlag(("--rdzv-endpoint", "--rdzv_endpoint"), _IGNORED, "ignored, with a note (the same)",
                 says=_RENDEZVOUS, metavar="HOST:PORT"),
    TorchrunFlag(("--rdzv-id", "--rdzv_id"), _HONOURED, "the run's name, `TORCHELASTIC_RUN_ID` in the "
                 "ranks as typed, as under torchrun, and reused as freely: the same id again continues its "
                 "run where its driver died, it was stopped or it exited 75, and once that run succeeded or "
                 "failed starts a new one, numbered after it (`job-7.2`, `job-7.3`, ...: the run's id, "
                 "`ELASTIC_RUN_ID` and its directory)", metavar="ID"),
    TorchrunFlag(("--rdzv-conf", "--rdzv_conf"), _IGNORED, "ignored, with a note (the same; "
                 "`--node-wait-timeout` is how long elastic waits for nodes)", says=_RENDEZVOUS,
                 metavar="KEY=VALUE,..."),
    TorchrunFlag(("--standalone",), _HONOURED, "the same: this machine alone (the `local` backend, "
                 "even with `RAY_ADDRESS` set); refused with `--nnodes` above 1", switch=True),
    TorchrunFlag(("--max-restarts", "--max_restarts"), _SAME, "`--max-restarts`; preemptions and lost "
                 "nodes are charged to their own budget, `--max-preemptions`", option="--max-restarts"),
    TorchrunFlag(("--monitor-interval", "--monitor_interval"), _IGNORED, "ignored, with a note: elastic "
                 "hears of a rank's exit when it happens", says="elastic hears of a rank's exit when it "
                 "happens, with no polling interval", metavar="SECONDS"),
    TorchrunFlag(("--start-method", "--start_method"), _IGNORED, "ignored, with a note: every rank is a "
                 "process of its own, started afresh", says="every rank is a process of its own, started "
                 "afresh", metavar="METHOD"),
    TorchrunFlag(("--event-log-handler", "--event_log_handler"), _IGNORED, "ignored, with a note: "
                 "elastic's events go to the journal, `RUN_DIR/journal.jsonl`, and to stderr",
                 says="elastic's events go to the journal, RUN_DIR/journal.jsonl, and to stderr",
                 metavar="HANDLER"),
    TorchrunFlag(("--role",), _IGNORED, "ignored, with a note: every rank's `ROLE_NAME` is `default`",
                 says="every rank's ROLE_NAME is 'default'", metavar="ROLE"),
    TorchrunFlag(("-m", "--module"), _HONOURED, "the same: `-m MODULE ARGS` runs `python -m MODULE ARGS` "
                 "with this Python", switch=True),
    TorchrunFlag(("--no-python", "--no_python"), _HONOURED, "the same: `--no-python PROGRAM ARGS` runs "
                 "the program itself, as `-- PROGRAM ARGS` does", switch=True),
    TorchrunFlag(("--run-path", "--run_path"), _HONOURED, "the script runs with this Python, as without "
                 "it (torchrun runs it with `runpy.run_path` in each rank's process)", switch=True),
    TorchrunFlag(("--log-dir", "--log_dir"), _SAME, "`--runs-dir`: the run's logs go in "
                 "`LOG_DIR/<run-id>/attempt-K/rank-R.log`", option="--runs-dir"),
    TorchrunFlag(("-r", "--redirects"), _IGNORED, f"ignored, with a note: {_OUTPUT}", says=_OUTPUT,
                 metavar="N"),
    TorchrunFlag(("-t", "--tee"), _IGNORED, "ignored, with a note (the same)", says=_OUTPUT, metavar="N"),
    TorchrunFlag(("--local-ranks-filter", "--local_ranks_filter"), _SAME, "`--ranks`: the ranks whose "
                 "output the console shows, by global rank (on one node, the local ranks)",
                 option="--ranks"),
    TorchrunFlag(("--duplicate-stdout-filters", "--duplicate_stdout_filters"), _IGNORED,
                 "ignored, with a note (the same as `--redirects`)", says=_OUTPUT, metavar="FILTERS"),
    TorchrunFlag(("--duplicate-stderr-filters", "--duplicate_stderr_filters"), _IGNORED,
                 "ignored, with a note (the same as `--redirects`)", says=_OUTPUT, metavar="FILTERS"),
    TorchrunFlag(("--node-rank", "--node_rank"), _HONOURED, "`0` is accepted, with a note; any other is "
                 "refused: one elastic command starts every node's ranks (through Ray), so run it once, "
                 "not once per node", metavar="N"),
    TorchrunFlag(("--master-addr", "--master_addr"), _SAME, "`--master-addr`: `MASTER_ADDR` for the ranks",
                 option="--master-addr"),
    TorchrunFlag(("--master-port", "--master_port"), _SAME, "`--master-port`: `MASTER_PORT` for the ranks "
                 "(default: a free port each attempt)", option="--master-port"),
    TorchrunFlag(("--local-addr", "--local_addr"), _IGNORED, "ignored, with a note: a node's address is "
                 "the one Ray knows it by (`127.0.0.1` on one machine)", says="a node's address is the one "
                 "Ray knows it by (127.0.0.1 on one machine)", metavar="ADDR"),
    TorchrunFlag(("--logs-specs", "--logs_specs"), _IGNORED, "ignored, with a note (the same as "
                 "`--redirects`)", says=_OUTPUT, metavar="NAME"),
    TorchrunFlag(("--numa-binding", "--numa_binding"), _REFUSED, "refused: elastic binds no rank to CPUs",
                 says="elastic binds no rank to CPUs; drop the flag, or bind in the training script by "
                 "LOCAL_RANK", metavar="MODE"),
    TorchrunFlag(("--signals-to-handle", "--signals_to_handle"), _IGNORED, "ignored, with a note: elastic "
                 "forwards SIGTERM, SIGINT and SIGHUP to the ranks as a stop, and takes `--notice-signal` as "
                 "a preemption notice", says="elastic forwards SIGTERM, SIGINT and SIGHUP to the ranks as a "
                 "stop, and takes --notice-signal (USR1) as a preemption notice", metavar="SIGNALS"),
    TorchrunFlag(("--shutdown-timeout", "--shutdown_timeout"), _SAME, "`--grace-period`: the time ranks get "
                 "between the stop signal and SIGKILL when the launcher is stopped",
                 option="--grace-period"),
    TorchrunFlag(("--virtual-local-rank", "--virtual_local_rank"), _REFUSED, "refused: each rank keeps "
                 "its own `LOCAL_RANK`; `--isolate-gpus` shows each rank only its GPU",
                 says="each rank keeps its own LOCAL_RANK; --isolate-gpus shows each rank only its GPU",
                 switch=True),
)

_NODE_RANK_NOTE = "elastic starts every node's ranks from this one command (through Ray); run it once, not once per node"


def _given(args: argparse.Namespace, flag: TorchrunFlag) -> bool:
    value = getattr(args, flag.dest, None)
    return value is True if flag.switch else value is not None


_SEE = " (see docs/reference/torchrun.md)"


def refusal(args: argparse.Namespace) -> ConfigError | None:
    """The first of torchrun's flags that elastic cannot honour, as the error to say; else None."""
    for flag in FLAGS:
        if flag.fate is Fate.REFUSED and _given(args, flag):
            return ConfigError(flag.name, f"{flag.says}{_SEE}")
    node_rank = getattr(args, "node_rank", None)
    if node_rank is not None and node_rank != 0:
        return ConfigError(
            "--node-rank", f"{node_rank}: elastic starts every node's ranks from one command (through "
            f"Ray); run it once, on one machine, without --node-rank{_SEE}"
        )
    return None


def notes(args: argparse.Namespace) -> list[str]:
    """One line for each thing torchrun's flags asked that elastic does its own way.

    Flags with the same note share its line: ``--rdzv-backend, --rdzv-endpoint: ignored: ...``.
    """
    said: dict[str, list[str]] = {}
    for flag in FLAGS:
        if flag.fate is Fate.IGNORED and _given(args, flag):
            said.setdefault(str(flag.says), []).append(flag.name)
    if getattr(args, "node_rank", None) == 0:
        said.setdefault(_NODE_RANK_NOTE, []).append("--node-rank 0")
    return [f"{', '.join(flags)}: ignored: {note.replace('`', '')}" for note, flags in said.items()]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(flags: Sequence[TorchrunFlag] = FLAGS) -> str:
    """The table of torchrun's flags of docs/reference/torchrun.md."""
    rows = ["| torchrun | elastic |", "|---|---|"]
    for flag in flags:
        shown = ", ".join(f"`{spelling}`" for spelling in flag.spellings)
        rows.append(f"| {_cell(shown)} | {_cell(flag.elastic)} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python -m elastic.cli.torchrun: the docs' table, to paste
    print(markdown_table(), end="")
