"""JAX's distributed runtime from the launcher's variables: ``elastic.worker.jax.initialize()``.

With the rank bootstrap (``--rank-bootstrap on``, the default) a bare
``jax.distributed.initialize()`` already joins elastic's world
(:mod:`elastic.worker.bootstrap.jax_cluster`); this helper is for a rank the
bootstrap does not reach (``--rank-bootstrap off``, ``python -E``, a JAX whose
internals differ) and for scripts that prefer to say what they join. It passes
everything: the attempt's coordinator (``ELASTIC_COORDINATOR_ADDRESS``, which
is always ``host:port``; ``JAX_COORDINATOR_ADDRESS`` is the host alone under
the bootstrap, as XPK sets it), ``num_processes`` from ``WORLD_SIZE``,
``process_id`` from ``RANK``, the device from ``JAX_LOCAL_DEVICE_IDS``, and turns
JAX's cluster detection off otherwise, so the variables of a Slurm job that
``elastic run`` was started in can never override the launcher's world.

It imports only the standard library until :func:`initialize` is called (JAX
is imported then), like the rest of :mod:`elastic.worker`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["COORDINATOR_VAR", "LOCAL_DEVICE_IDS_VAR", "distributed_arguments", "initialize"]

# What jax.distributed.initialize() itself reads (jax/_src/distributed.py).
COORDINATOR_VAR = "JAX_COORDINATOR_ADDRESS"
LOCAL_DEVICE_IDS_VAR = "JAX_LOCAL_DEVICE_IDS"
# Ours: host:port always (JAX_COORDINATOR_ADDRESS is the host alone under the bootstrap).
_ELASTIC_COORDINATOR_VAR = "ELASTIC_COORDINATOR_ADDRESS"


def distributed_arguments(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The keyword arguments of ``jax.distributed.initialize`` that the launcher's variables give.

    ``coordinator_address`` (``ELASTIC_COORDINATOR_ADDRESS``, else a ``host:port``
    ``JAX_COORDINATOR_ADDRESS``), ``num_processes`` (``WORLD_SIZE``), ``process_id``
    (``RANK``), ``local_device_ids`` when ``JAX_LOCAL_DEVICE_IDS`` is set, and
    ``cluster_detection_method="deactivate"`` otherwise, so JAX neither looks
    for Slurm or Open MPI variables nor narrows the devices itself.
    Raises :class:`RuntimeError` naming the missing variable outside ``elastic run``.
    """
    env = os.environ if env is None else env
    given = env.get(COORDINATOR_VAR, "")
    coordinator = env.get(_ELASTIC_COORDINATOR_VAR) or (given if ":" in given else "")
    missing = [
        name
        for name, value in ((COORDINATOR_VAR, coordinator), ("WORLD_SIZE", env.get("WORLD_SIZE")), ("RANK", env.get("RANK")))
        if not value
    ]
    if missing:
        raise RuntimeError(
            f"elastic.worker.jax.initialize(): {', '.join(missing)} not set; run the script under `elastic run`"
        )
    arguments: dict[str, Any] = {
        "coordinator_address": coordinator,
        "num_processes": int(env["WORLD_SIZE"]),
        "process_id": int(env["RANK"]),
    }
    devices = env.get(LOCAL_DEVICE_IDS_VAR)
    if devices:
        arguments["local_device_ids"] = [int(device) for device in devices.split(",")]
    else:
        arguments["cluster_detection_method"] = "deactivate"
    return arguments


def initialize(**overrides: Any) -> None:
    """``jax.distributed.initialize`` with the launcher's world; ``overrides`` are passed on
    (``initialization_timeout``, ``heartbeat_timeout_seconds``, any argument to replace)."""
    import jax  # only here: importing elastic.worker never needs JAX

    jax.distributed.initialize(**{**distributed_arguments(), **overrides})
