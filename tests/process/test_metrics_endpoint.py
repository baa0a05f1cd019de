"""The metrics endpoint: Prometheus text that parses, with counters that match the journal."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from harness import (
    Launcher,
    Samples,
    heartbeat_age,
    read_pids,
    scrape,
    script,
    wait_for,
)

pytest.importorskip("prometheus_client.parser")


def test_metrics_parse_and_match_the_journal(launcher: Launcher, pid_dir: Path) -> None:
    """After one SIGKILLed rank and a restart, the scrape shows attempt 1, one kill, running."""
    process = launcher.start("--metrics-port", 0, "--max-restarts", 2, "--nproc-per-node", 2,
                             command=script("by_attempt.py", pid_dir, "0=exit:9", "1=sleep"))
    port = launcher.wait_for_event("metrics_serving")["port"]
    read_pids(pid_dir, 2)
    # Both ranks of attempt 1 can be alive a moment before the launch is reported (phase
    # launching): wait for one scrape that shows both.
    samples = wait_for(lambda: _running_with_both(scrape(port)), "both ranks of attempt 1 running, phase running")
    process.terminate()
    assert 143 == launcher.finished(process).returncode

    journal = launcher.finished(process).events("restart_scheduled")
    assert 1 == len(journal)
    assert 1.0 == samples[("elastic_attempt", ())]
    assert 1.0 == samples[("elastic_phase", (("phase", "running"),))]
    assert 0.0 == samples[("elastic_phase", (("phase", "draining"),))]
    assert 1.0 == samples[("elastic_restarts_total", (("kind", "exited"),))]
    assert 1.0 == samples[("elastic_budget_remaining", (("budget", "failures"),))]
    assert math.isnan(samples[("elastic_goodput_ratio", ())])  # no step shown: the share is not known
    # The goodput ledger up to the scrape: both attempts launched and attempt 0 drained; no step shown.
    assert samples[("elastic_badput_seconds_total", (("cause", "launch"),))] > 0
    assert samples[("elastic_badput_seconds_total", (("cause", "drain"),))] > 0
    assert samples[("elastic_badput_seconds_total", (("cause", "running_no_steps"),))] > 0
    assert 0.0 == samples[("elastic_goodput_seconds_total", ())]


def test_metrics_bind_loopback_by_default(launcher: Launcher, pid_dir: Path) -> None:
    """Without --metrics-host the endpoint listens on 127.0.0.1 only."""
    process = launcher.start("--metrics-port", 0, command=script("sleep_forever.py", pid_dir))
    serving = launcher.wait_for_event("metrics_serving")
    process.terminate()
    launcher.finished(process)
    assert "127.0.0.1" == serving["host"]


def test_heartbeat_ages_show_which_rank_went_quiet(launcher: Launcher) -> None:
    """Per-rank ages: the rank that stopped calling heartbeat() ages, the other stays fresh."""
    process = launcher.start("--metrics-port", 0, "--nproc-per-node", 2,
                             command=script("goes_silent.py", "api", 0, 1))
    port = launcher.wait_for_event("metrics_serving")["port"]
    def rank_1_quiet() -> Samples | None:
        samples = scrape(port)
        return samples if (heartbeat_age(samples, 1) or 0.0) > 1.5 else None

    try:
        samples = wait_for(rank_1_quiet, "rank 1's heartbeat to age")
    finally:
        process.terminate()
        launcher.finished(process)
    assert (heartbeat_age(samples, 0) or 99) < 1.0


def _running_with_both(samples: Samples) -> Samples | None:
    running = samples.get(("elastic_phase", (("phase", "running"),))) == 1.0
    return samples if running and samples.get(("elastic_ranks_alive", ())) == 2 else None
