"""The failure mixes a schedule is drawn from, in the seconds of the clusters they imitate. Pure.

- ``llama3``: Meta's Llama 3 405B pre-training (The Llama 3 Herd of Models, 2024, table 5):
  466 interruptions in 54 days on 16,384 GPUs, 47 planned, 419 unexpected, about 78 % of
  these hardware. Each cause of the table is mapped to what it does to a job: a GPU, its
  memory or SRAM, its system processor, silent data corruption or thermals kill the rank
  (``sigkill``, 268 of 419); software bugs and dependencies raise in the step (``exception``,
  56); switches, cables, NICs and NCCL watchdogs hang the collective (``sigstop``, 49); host
  maintenance, SSDs, power, chassis, IO boards, CPUs and memory lose the machine
  (``node_lost``, 46). The 47 planned ones (firmware, configuration and data set updates)
  come with a notice (``preemption``, 10 minutes: an assumption).
- ``spot``: spot capacity: every event is a preemption with a notice (2 minutes on AWS, 30 s
  on GCP and Azure), and about a third start a burst of up to 3 more within 5 minutes. The
  rate, one an hour for the job, is an assumption (a job on some tens of instances).
- ``rsc``: a research cluster at Meta's RSC rates (Kokolis et al., Revisiting Reliability in
  Large-Scale Machine Learning Research Clusters, 2024): a mean time to failure of 7.9 hours
  for a job of 1,024 GPUs. The shares of kinds are our reading of its failure taxonomy (GPUs
  lost or erroring, InfiniBand links, file system mounts, user software, scheduler
  preemptions, the launcher's host), not the paper's table.

Checkpoint cost and interval are assumptions of the same order as published large runs'
(tens of seconds to write, every half hour); the runner prints the Young/Daly optimum for the
cost it measures.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from goodput.schedule import Event, Schedule

__all__ = ["MIXES", "Mix", "Share", "generate"]

DAY_S = 86_400.0


@dataclass(frozen=True)
class Share:
    """One kind of event in a mix: its weight, what it stands for, and its notices (seconds: weight)."""

    kind: str
    weight: float
    cause: str
    planned: bool = False
    notices: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class Mix:
    """A mix of events, its rate and its bursts, and the job's checkpoint figures, in real seconds."""

    name: str
    mtbf_s: float
    shares: tuple[Share, ...]
    checkpoint_interval_s: float
    checkpoint_cost_s: float
    burst_p: float = 0.0  # the chance that an event starts a burst
    burst_max: int = 0  # at most this many more events in a burst
    burst_window_s: float = 0.0  # within this long after the first


MIXES = {
    "llama3": Mix(
        "llama3",
        mtbf_s=54 * DAY_S / 466,
        shares=(
            Share("sigkill", 268, "GPU, HBM3, SRAM, GPU system processor, silent data corruption, thermals"),
            Share("exception", 56, "software bug, dependency"),
            Share("sigstop", 49, "network switch or cable, NIC, NCCL watchdog"),
            Share("node_lost", 46, "host maintenance, SSD, power, chassis, IO board, CPU, memory"),
            Share("preemption", 47, "planned: firmware, configuration, data set updates", True, ((600.0, 1.0),)),
        ),
        checkpoint_interval_s=1800.0,
        checkpoint_cost_s=60.0,
    ),
    "spot": Mix(
        "spot",
        mtbf_s=3600.0,
        shares=(
            Share("preemption", 0.5, "spot reclaim, AWS", notices=((120.0, 1.0),)),
            Share("preemption", 0.5, "spot reclaim, GCP or Azure", notices=((30.0, 1.0),)),
        ),
        checkpoint_interval_s=600.0,
        checkpoint_cost_s=30.0,
        burst_p=0.35,
        burst_max=3,
        burst_window_s=300.0,
    ),
    "rsc": Mix(
        "rsc",
        mtbf_s=7.9 * 3600.0,
        shares=(
            Share("sigkill", 45, "GPU lost, ECC or NVLink error"),
            Share("sigstop", 15, "InfiniBand link, NCCL hang"),
            Share("exception", 15, "file system mount, user software"),
            Share("node_lost", 10, "host down"),
            Share("preemption", 10, "scheduler preemption", True, ((120.0, 1.0),)),
            Share("driver_kill", 5, "the launcher's host"),
        ),
        checkpoint_interval_s=1800.0,
        checkpoint_cost_s=60.0,
    ),
    # Not a published trace: the launcher's own process dying alone, as the kernel's OOM killer
    # picks the biggest process of a host (often the driver, holding every rank's bookkeeping)
    # or someone types kill -9; the job's other processes live on. The one mix in which a
    # launcher can take its ranks over (elastic's --orphan-lease), at RSC's cadence.
    "driver": Mix(
        "driver",
        mtbf_s=7.9 * 3600.0,
        shares=(Share("driver_oom", 1, "the launcher alone: the OOM killer, a kill -9"),),
        checkpoint_interval_s=1800.0,
        checkpoint_cost_s=60.0,
    ),
}


def _event(rng: random.Random, mix: Mix, at_s: float, nranks: int, burst: int | None, share: Share | None = None) -> Event:
    share = share or rng.choices(mix.shares, weights=[s.weight for s in mix.shares])[0]
    notice = 0.0
    if share.notices:
        notice = rng.choices([n for n, _ in share.notices], weights=[w for _, w in share.notices])[0]
    rank = rng.randrange(nranks) if share.kind in ("sigkill", "sigstop", "exception") else None
    return Event(at_s, share.kind, rank, notice, burst, share.planned, share.cause)


def generate(mix: Mix, seed: int, events: int | None = None, duration_s: float | None = None, nranks: int = 2) -> Schedule:
    """A schedule of ``events`` events (its duration: the last one's time and one more mean
    gap), or of every event within ``duration_s``: Poisson arrivals at the mix's rate, each
    of a kind drawn by the mix's weights, each arrival starting a burst with the mix's chance."""
    if (events is None) == (duration_s is None):
        raise ValueError("give either a number of events or a duration")
    rng = random.Random(seed)
    drawn: list[Event] = []
    at_s, bursts = 0.0, 0
    while True:
        at_s += rng.expovariate(1.0 / mix.mtbf_s)
        if duration_s is not None and at_s > duration_s:
            break
        burst = None
        group = [at_s]
        if mix.burst_max and rng.random() < mix.burst_p:
            burst, bursts = bursts, bursts + 1
            group += sorted(at_s + rng.uniform(0, mix.burst_window_s) for _ in range(rng.randint(1, mix.burst_max)))
        drawn += [_event(rng, mix, t, nranks, burst) for t in group]
        if events is not None and len(drawn) >= events:
            break
    drawn.sort(key=lambda e: e.at_s)
    if events is not None:
        drawn = drawn[:events]
        duration_s = (drawn[-1].at_s if drawn else 0.0) + mix.mtbf_s
    assert duration_s is not None
    drawn = [e for e in drawn if e.at_s <= duration_s]
    return Schedule(
        mix.name,
        seed,
        duration_s,
        mix.mtbf_s,
        mix.checkpoint_interval_s,
        mix.checkpoint_cost_s,
        tuple(drawn),
        nranks=nranks,
    )
