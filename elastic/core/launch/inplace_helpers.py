"""What an attempt with in-place restarts (``--spares K``) starts beside its ranks. Pure.

Two kinds of process that are not ranks, each a :class:`~elastic.core.launch.spec.WorkerSpec`
with its :class:`~elastic.core.launch.spec.Role`:

- the **store's host** (:func:`store_host_spec`): ``PYTHON -m elastic.worker.inplace.store_host``
  with the ranks' own Python (the launcher does not import torch), on the first node, at the
  address every rank is given as ``ELASTIC_INPLACE_STORE``, so that no rank's death takes the
  process group's store with it;
- **warm spares** (:func:`spare_specs`): the rank's own command, ``K`` per node, started with
  ``ELASTIC_INPLACE_SPARE=1``, a notice file of their own and none of a rank's identity (no
  rank, no heartbeat, error, start-up or signals file of a rank: those would be read as the
  rank's), so they run the script up to ``InPlace.generations()`` and wait there for a lost
  rank's place.

A spare's exit is not a rank's failure, and the store host's end is not one either: the node
supervises both apart from the ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from elastic.core.launch.plan import AttemptPlan
from elastic.core.launch.prewarm_fit import is_python
from elastic.core.launch.spec import Role, WorkerSpec
from elastic.core.run_layout import RunLayout
from elastic.worker.inplace.notice import GENERATION_VAR, NOTICE_VAR, SPARE_VAR

__all__ = ["RANK_IDENTITY", "STORE_HOST_MODULE", "inplace_unfit", "rank_identity", "spare_specs", "store_host_spec"]

STORE_HOST_MODULE = "elastic.worker.inplace.store_host"

# A rank's identity in its environment: a spare has none until it is handed a place.
RANK_IDENTITY = frozenset(
    {
        "RANK", "LOCAL_RANK", "GLOBAL_RANK", "ROLE_RANK", "GROUP_RANK", "NODE_RANK", GENERATION_VAR,
        "ELASTIC_HEARTBEAT_FILE", "ELASTIC_PREEMPTION_FILE", "ELASTIC_SIGNALS_FILE",
        "ELASTIC_STARTUP_FILE", "TORCHELASTIC_ERROR_FILE",
    }
)


def rank_identity(lost: WorkerSpec, generation: int) -> tuple[tuple[str, str], ...]:
    """The variables a spare takes on with ``lost``'s place in ``generation`` (its numbers and its
    files, so the node reads the spare as that rank), in a stable order."""
    identity = {name: value for name, value in lost.env.items() if name in RANK_IDENTITY}
    identity[GENERATION_VAR] = str(generation)
    return tuple(sorted(identity.items()))


def inplace_unfit(argv: Sequence[str]) -> str | None:
    """Why ``--spares`` cannot serve this command, or ``None``: the store's host runs with the
    ranks' Python, so the command must start one (``python SCRIPT.py``, ``python -m MODULE``)."""
    if not argv or not is_python(argv[0]):
        program = argv[0] if argv else "nothing"
        return f"in-place restarts need a python command (python SCRIPT.py, python -m MODULE), not {program!r}"
    return None


def store_host_spec(plan: AttemptPlan, ranks: Sequence[WorkerSpec], layout: RunLayout) -> WorkerSpec:
    """The process that hosts the attempt's store (``plan.inplace_store``) on the first node, with
    the Python and environment of that node's first rank."""
    if plan.inplace_store is None:
        raise ValueError(f"attempt {plan.attempt} has no in-place store")
    host, _, port = plan.inplace_store.rpartition(":")
    first = min(ranks, key=lambda spec: spec.rank)
    ready = layout.store_host_address(plan.attempt)
    env = {name: value for name, value in first.env.items() if name not in RANK_IDENTITY}
    return WorkerSpec(
        attempt=plan.attempt,
        rank=first.rank,
        local_rank=first.local_rank,
        node_id=first.node_id,
        argv=(first.argv[0], "-m", STORE_HOST_MODULE, host, port, str(ready)),
        env=env,
        log_path=str(layout.store_host_log(plan.attempt)),
        cwd=first.cwd,
        role=Role.STORE,
    )


def spare_specs(plan: AttemptPlan, ranks: Sequence[WorkerSpec], layout: RunLayout, spares: int) -> tuple[WorkerSpec, ...]:
    """``spares`` warm spares on each node of ``ranks``: the command of the node's first rank, its
    environment without a rank's identity, ``ELASTIC_INPLACE_SPARE=1`` and a notice file each."""
    firsts: dict[str, WorkerSpec] = {}
    for spec in sorted(ranks, key=lambda spec: spec.rank):
        firsts.setdefault(spec.node_id, spec)
    node_ranks = {slot.node_id: index for index, slot in enumerate(plan.nodes)}
    specs = []
    for node_id, first in firsts.items():
        node_rank = node_ranks[node_id]
        for index in range(spares):
            env = {name: value for name, value in first.env.items() if name not in RANK_IDENTITY}
            env[SPARE_VAR] = "1"
            env[NOTICE_VAR] = str(layout.spare_notice(plan.attempt, node_rank, index))
            specs.append(
                replace(
                    first,
                    env=env,
                    log_path=str(layout.spare_log(plan.attempt, node_rank, index)),
                    role=Role.SPARE,
                    spare_index=index,
                    hang=None,
                    progress=None,
                    init_timeout=None,
                    prewarm=(),
                    prewarm_memory_pct=0.0,
                    stack_path=None,
                )
            )
    return tuple(specs)
