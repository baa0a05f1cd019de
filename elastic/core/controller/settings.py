"""What the controller is told once, at the start: one frozen value built from the run's configuration. Pure.

:class:`ControllerSettings` holds every option the controller decides with (the
graces, the crash loop, ``--exit-timeout``, the notice's signal, ``--on-straggler``,
``--scale-up``) and where a run taken over goes on from (its next attempt, the
stragglers' nodes it left out). :func:`controller_settings` builds it from a
:class:`elastic.core.options.config.RunConfig` and, for a takeover, the dead driver's
:class:`elastic.core.journal.recovery.PriorRun`. Its defaults are those of a controller
given nothing but the grace, as unit tests build one.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from elastic.core.controller.drain import DEFAULT_FAILURE_GRACE_S
from elastic.core.inplace.fallback import DEFAULT_REFORM_TIMEOUT_S
from elastic.core.journal.recovery import PriorRun
from elastic.core.options.config import RunConfig
from elastic.core.policy.restarts import ExitHang, ScaleUp
from elastic.core.training.stragglers import OnStraggler

__all__ = ["ControllerSettings", "controller_settings"]


@dataclass(frozen=True)
class ControllerSettings:
    """The controller's options, read once (``--grace-period`` is ``grace_s``)."""

    grace_s: float  # --grace-period: a drain that lets ranks save (a stop, a scale-up, a notice)
    failure_grace_s: float = DEFAULT_FAILURE_GRACE_S  # --failure-grace: a drain after a failure
    tracks_progress: bool = False  # a --checkpoint-dir says whether an attempt made progress
    max_no_progress: int | None = None  # --max-no-progress: the crash loop
    first_attempt: int = 0  # a run taken over goes on from its next attempt
    scale_up: ScaleUp = field(default_factory=lambda: ScaleUp(enabled=False))
    exit_timeout_s: float | None = None  # --exit-timeout; None: ranks may outlive their peers
    exit_hang: ExitHang = ExitHang.RESTART  # --exit-hang
    min_nodes: int = 1  # --nnodes MIN
    preempt_signal: int = signal.SIGTERM  # --preempt-signal; 0: none (the notice file alone)
    on_straggler: OnStraggler = OnStraggler.WARN  # --on-straggler
    left_out: tuple[str, ...] = ()  # a dead driver's stragglers' nodes stay out
    longest_init_s: float | None = None  # a dead driver's run's longest distributed initialisation
    spares: int = 0  # --spares: warm spares per node; above 0 a failure is repaired in place where it can be
    reform_timeout_s: float = DEFAULT_REFORM_TIMEOUT_S  # --reform-timeout: a re-formed world's first step


def controller_settings(config: RunConfig, prior: PriorRun | None = None) -> ControllerSettings:
    """The settings of a run's controller: its configuration's, going on from ``prior`` if given."""
    return ControllerSettings(
        grace_s=config.grace_period_s,
        failure_grace_s=config.failure_grace_s,
        tracks_progress=config.checkpoint_dir is not None,
        max_no_progress=config.max_no_progress,
        first_attempt=prior.next_attempt if prior else 0,
        scale_up=ScaleUp(
            enabled=config.scale_up and config.checkpoint_dir is not None,
            interval_s=config.scale_up_interval_s,
            max_nodes=config.max_nodes,
        ),
        exit_timeout_s=config.exit_timeout_s,
        exit_hang=config.exit_hang,
        min_nodes=config.min_nodes,
        preempt_signal=config.preempt_signal,
        on_straggler=config.on_straggler,
        left_out=prior.left_out if prior else (),
        longest_init_s=prior.longest_init_s if prior else None,
        spares=config.spares,
        reform_timeout_s=config.reform_timeout_s,
    )
