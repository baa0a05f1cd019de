"""The validated, frozen run configuration: every field checked on construction.

What each field allows, and its default, come from the option table
(:mod:`elastic.core.options.table`), so ``RunConfig(max_restarts=-1)`` in code is refused
with the same one-line message, naming the flag, as ``--max-restarts -1``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic.worker.heartbeat import HangPolicy
from elastic.core.options.table import OPTIONS, PATH, option
from elastic.core.launch.inplace_helpers import inplace_unfit
from elastic.core.launch.spec import resume_placeholder_error
from elastic.core.training.init_hang import InitTimeout
from elastic.core.training.stall import ProgressPolicy
from elastic.core.training.stragglers import OnStraggler
from elastic.core.policy.restarts import ExitHang
from elastic.core.policy.rules import ExitRule
from elastic.core.diagnosis.signatures import Signature
from elastic.core.options.values import (
    NODES,
    NPROC,
    RUN_ID,
    ConfigError,
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

__all__ = [
    "BACKENDS",
    "ConfigError",
    "LogFormat",
    "RunConfig",
    "parse_listen_port",
    "parse_master_port",
    "parse_backoff",
    "parse_limit",
    "parse_nnodes",
    "parse_window",
    "parse_positive_seconds",
    "parse_timeout",
    "parse_nonnegative_int",
    "parse_positive_int",
    "parse_nproc",
    "parse_ranks",
    "parse_run_id",
    "parse_seconds",
]

BACKENDS = ("local", "ray")  # what --backend auto resolves to


def _default(flag: str) -> Any:
    """The field value of ``flag`` when it is not given."""
    row = option(flag)
    return row.to_field(row.default)


def _refuse(flag: str, allowed: str, value: object) -> ConfigError:
    return ConfigError(flag, f"must be {allowed}, got {value!r}")


@dataclass(frozen=True)
class RunConfig:
    """Everything ``elastic run`` was asked to do, validated; read once at the edge.

    Fields set as is by one option (``field=`` in :data:`elastic.core.options.table.OPTIONS`)
    take its default and its check; the rest are checked here.
    """

    command: tuple[str, ...]
    run_id: str
    run_dir: Path
    nproc_per_node: int | None  # None: each node's GPU count (1 without GPUs)
    max_restarts: int = _default("--max-restarts")
    grace_period_s: float = _default("--grace-period")
    orphan_lease_s: float = _default("--orphan-lease")  # 0: the ranks die with the driver
    failure_grace_s: float = _default("--failure-grace")
    notice_signal: int = _default("--notice-signal")
    preempt_signal: int = _default("--preempt-signal")  # 0: none
    backend: str = "local"  # --backend, auto resolved
    echo_ranks: frozenset[int] | None = _default("--ranks")
    log_format: LogFormat = _default("--log-format")
    isolate_gpus: bool = _default("--isolate-gpus")
    rank_bootstrap: bool = _default("--rank-bootstrap")
    prewarm: tuple[str, ...] = _default("--prewarm")
    prewarm_delay_s: float = _default("--prewarm-delay")
    prewarm_memory_pct: float = _default("--prewarm-memory")
    spares: int = _default("--spares")  # 0: no in-place restarts
    reform_timeout_s: float = _default("--reform-timeout")  # a re-formed world's first step, at the latest
    master_addr: str | None = _default("--master-addr")
    master_port: int | None = _default("--master-port")
    min_nodes: int = 1  # --nnodes MIN:MAX
    max_nodes: int = 1
    node_wait_timeout_s: float = _default("--node-wait-timeout")
    preflight: tuple[str, ...] | None = _default("--preflight")  # run on each node before each attempt
    preflight_timeout_s: float = _default("--preflight-timeout")
    address: str | None = _default("--address")
    node_resource: str | None = _default("--node-resource")
    on_exit: tuple[ExitRule, ...] = _default("--on-exit")
    signatures: tuple[Signature, ...] = _default("--signature")  # tried before the built-in ones
    restart_window_s: float | None = _default("--restart-window")
    max_preemptions: int | None = _default("--max-preemptions")
    preemption_window_s: float | None = _default("--preemption-window")
    backoff_s: tuple[float, float] = _default("--backoff")
    max_no_progress: int | None = _default("--max-no-progress")
    checkpoint_dir: Path | None = None
    cache_dir: Path | None = None  # --cache-dir, absolute (the CLI's default: run_dir/cache); None: off
    # torchrun's --rdzv-id as typed, where its run has another id (job-7.2 after job-7 finished):
    # the ranks' TORCHELASTIC_RUN_ID, as torchrun sets it. None: the run id.
    torchelastic_run_id: str | None = None
    checkpoint_pattern: re.Pattern[str] | None = _default("--checkpoint-pattern")  # None: built-in
    scale_up: bool = _default("--scale-up")
    scale_up_interval_s: float = _default("--scale-up-interval")
    metrics_port: int | None = _default("--metrics-port")
    metrics_host: str = _default("--metrics-host")
    hang: HangPolicy | None = None  # --heartbeat-timeout and friends; None: off
    init_timeout: InitTimeout = _default("--init-timeout")  # a rank hung in its distributed initialisation
    progress: ProgressPolicy = ProgressPolicy()  # --progress-pattern, --stall-timeout, --stall-floor
    exit_timeout_s: float | None = _default("--exit-timeout")  # None: ranks may outlive peers forever
    exit_hang: ExitHang = _default("--exit-hang")
    on_straggler: OnStraggler = _default("--on-straggler")

    def __post_init__(self) -> None:
        if not self.command:
            raise ConfigError("COMMAND", "missing: give the training command after '--'")
        if not isinstance(self.command, tuple) or not all(isinstance(a, str) for a in self.command):
            raise _refuse("COMMAND", "a tuple of strings", self.command)
        if (placeholder := resume_placeholder_error(self.command)) is not None:
            raise ConfigError("COMMAND", placeholder)
        if not RUN_ID.check(self.run_id):
            raise _refuse("--run-id", RUN_ID.allowed, self.run_id)
        if not (self.torchelastic_run_id is None or RUN_ID.check(self.torchelastic_run_id)):
            raise _refuse("--rdzv-id", RUN_ID.allowed, self.torchelastic_run_id)
        if not PATH.check(self.run_dir):
            raise _refuse("--run-dir", PATH.allowed, self.run_dir)
        if not NPROC.check(self.nproc_per_node):
            raise _refuse("--nproc-per-node", NPROC.allowed, self.nproc_per_node)
        if self.backend not in BACKENDS:
            raise _refuse("--backend", f"one of {', '.join(BACKENDS)}", self.backend)
        if not NODES.check((self.min_nodes, self.max_nodes)):
            raise _refuse("--nnodes", NODES.allowed, f"{self.min_nodes}:{self.max_nodes}")
        if not (self.checkpoint_dir is None or PATH.check(self.checkpoint_dir)):
            raise _refuse("--checkpoint-dir", PATH.allowed, self.checkpoint_dir)
        if not isinstance(self.progress, ProgressPolicy):
            raise _refuse("--stall-timeout", "a ProgressPolicy", self.progress)
        if not (self.cache_dir is None or PATH.check(self.cache_dir)):
            raise _refuse("--cache-dir", PATH.allowed, self.cache_dir)
        if not (self.hang is None or isinstance(self.hang, HangPolicy)):
            raise _refuse("--heartbeat-timeout", "a HangPolicy or None", self.hang)
        for row in OPTIONS:
            if row.field is not None and not row.allows(getattr(self, row.field)):
                raise _refuse(row.flag, row.allowed(), getattr(self, row.field))
        if self.orphan_lease_s > 0 and self.backend != "local":
            raise ConfigError("--orphan-lease", "keeps ranks on the local backend only, not on --backend ray yet")
        if self.spares > 0 and self.backend != "local":
            raise ConfigError("--spares", "in-place restarts run on the local backend only, not on --backend ray yet")
        if self.spares > 0 and self.orphan_lease_s > 0:
            raise ConfigError("--spares", "not with --orphan-lease yet: a taken-over attempt has no in-place store")
        if self.spares > 0 and (unfit := inplace_unfit(self.command)) is not None:
            raise ConfigError("--spares", unfit)
        if self.max_no_progress is not None and self.checkpoint_dir is None:
            raise ConfigError("--max-no-progress", "needs --checkpoint-dir to see progress")
        if self.checkpoint_pattern is not None and self.checkpoint_dir is None:
            raise ConfigError("--checkpoint-pattern", "needs --checkpoint-dir")
