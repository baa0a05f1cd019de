"""Elastic's world for JAX's distributed runtime, completed into JAX's modules as they load.

Loaded by the rank bootstrap (``sitecustomize.py`` beside it) when a rank
imports JAX, never before; standard library only, and it imports nothing of
elastic (a rank's environment need not have elastic installed).

- :func:`on_clusters`, once ``jax._src.clusters`` has run: defines
  ``ElasticCluster``, a ``ClusterEnv`` present whenever the rank runs under
  elastic (``RANK``, ``WORLD_SIZE`` and ``ELASTIC_COORDINATOR_ADDRESS`` set),
  and puts it first in JAX's detection order, before Slurm's, Open MPI's,
  Kubernetes' and the TPU VMs'. A bare ``jax.distributed.initialize()`` then
  takes its process count and id from elastic, inside a Slurm or Kubernetes
  allocation too. The device of a rank that shares a GPU node JAX reads
  itself from ``JAX_LOCAL_DEVICE_IDS``.
- :func:`on_distributed`, once ``jax._src.distributed`` has run: the
  coordinator of a call that joins elastic's world is the attempt's
  (:func:`coordinator_for`). JAX takes an address given to ``initialize()``,
  or ``JAX_COORDINATOR_ADDRESS``, over any cluster's; MaxText's CPU path names
  port 1234 of the host in ``JAX_COORDINATOR_ADDRESS``, which two runs on one
  host would share and where a stale coordinator could answer. Elastic's is a
  fresh port each attempt, so it replaces the given one (one line on stderr
  says so), but only for a call whose count and id are elastic's.

With a JAX whose internals differ (no ``ClusterEnv._cluster_types``, no
``State.initialize`` with those arguments), one warning line and nothing else.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, NamedTuple

__all__ = ["CompletingLoader", "World", "coordinator_for", "on_clusters", "on_distributed", "world_from_env"]

COORDINATOR_VAR = "ELASTIC_COORDINATOR_ADDRESS"  # host:port, a fresh port each attempt
LOCAL_DEVICE_IDS_VAR = "JAX_LOCAL_DEVICE_IDS"
_warned: list[str] = []


class World(NamedTuple):
    """Elastic's world as a rank sees it: the process count, this process's id, the coordinator."""

    size: int
    rank: int
    coordinator: str


def world_from_env(env: Mapping[str, str] | None = None) -> World | None:
    """Elastic's world from the rank's variables, or ``None`` outside ``elastic run``."""
    env = os.environ if env is None else env
    coordinator = env.get(COORDINATOR_VAR, "")
    try:
        size, rank = int(env.get("WORLD_SIZE", "")), int(env.get("RANK", ""))
    except ValueError:
        return None
    if ":" not in coordinator or not 0 <= rank < size:
        return None
    return World(size, rank, coordinator)


def coordinator_for(
    given: str | None, num_processes: int | None, process_id: int | None, world: World | None
) -> tuple[str | None, str | None]:
    """The coordinator address an ``initialize()`` call should use, and a line to print, or ``None``.

    A call whose count and id are elastic's (or left to detection) joins elastic's
    world: the attempt's coordinator, whatever address it names. A call for
    another world keeps its address; given none, it gets the attempt's (elastic's
    ``JAX_COORDINATOR_ADDRESS`` may be a bare host, which JAX cannot use).
    """
    if world is None:
        return given, None
    joins = num_processes in (None, world.size) and process_id in (None, world.rank)
    if joins:
        if given is None or given == world.coordinator:
            return world.coordinator, None
        return world.coordinator, (
            f"elastic: jax.distributed.initialize(coordinator_address={given!r}) joins elastic's world "
            f"(process {world.rank} of {world.size}): using this attempt's coordinator {world.coordinator}"
        )
    notice = (
        f"elastic: jax.distributed.initialize(num_processes={num_processes}, process_id={process_id}) "
        f"is not elastic's world (WORLD_SIZE={world.size}, RANK={world.rank}); left as given"
    )
    return (world.coordinator if given is None else given), notice


class CompletingLoader:
    """A JAX module's own loader and, once it has run the module, the bootstrap's completion of it
    (this module's ``on_clusters`` or ``on_distributed``, ``rank_signals.on_multihost_utils``,
    ``jax_cache_note.on_compilation_cache``); any
    error in the completion is one line, never a failed ``import jax``."""

    def __init__(self, loader: Any, completion: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._completion = completion

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)  # get_source, get_filename, resources...

    def create_module(self, spec: Any) -> Any:
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        try:
            self._completion(module)
        except Exception as error:
            sys.stderr.write(f"elastic: the rank bootstrap left JAX as it is ({type(error).__name__}: {error})\n")


def _warn_once(text: str) -> None:
    if not _warned:
        _warned.append(text)
        sys.stderr.write(f"elastic: {text}; a bare jax.distributed.initialize() does not join elastic's world "
                         "(call elastic.worker.jax.initialize(), or pass num_processes and process_id)\n")


def on_clusters(module: ModuleType) -> None:
    """Define elastic's ``ClusterEnv`` and put it first in JAX's detection order."""
    base = getattr(module, "ClusterEnv", None)
    order = getattr(base, "_cluster_types", None)
    if base is None or not isinstance(order, list):
        _warn_once(f"JAX {_jax_version()} has no ClusterEnv._cluster_types")
        return

    class ElasticCluster(base):  # type: ignore[misc, valid-type]  # JAX's class, known only here
        """Elastic's world: present in every rank ``elastic run`` started."""

        name = "elastic"
        opt_in_only_method = False

        @classmethod
        def is_env_present(cls) -> bool:
            return world_from_env() is not None

        @classmethod
        def get_coordinator_address(cls, *args: Any, **kwargs: Any) -> str:
            world = world_from_env()
            assert world is not None
            return world.coordinator

        @classmethod
        def get_process_count(cls) -> int:
            world = world_from_env()
            assert world is not None
            return world.size

        @classmethod
        def get_process_id(cls) -> int:
            world = world_from_env()
            assert world is not None
            return world.rank

        @classmethod
        def get_local_process_id(cls) -> int | None:
            # JAX 0.10 reads JAX_LOCAL_DEVICE_IDS itself before asking; older ones ask here.
            devices = os.environ.get(LOCAL_DEVICE_IDS_VAR, "")
            return int(devices) if devices.isdigit() else None

    if ElasticCluster in order:  # __init_subclass__ appended it
        order.remove(ElasticCluster)
    order.insert(0, ElasticCluster)


def on_distributed(module: ModuleType) -> None:
    """Make the coordinator of a call that joins elastic's world the attempt's."""
    state = getattr(module, "State", None)
    original = getattr(state, "initialize", None)
    if state is None or original is None or getattr(original, "_elastic_wrapped", False):
        if original is None:
            _warn_once(f"JAX {_jax_version()} has no distributed.State.initialize")
        return
    import functools
    import inspect

    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None
    if signature is None or not {"coordinator_address", "num_processes", "process_id"} <= set(signature.parameters):
        _warn_once(f"JAX {_jax_version()} has another distributed.State.initialize")
        return

    @functools.wraps(original)
    def initialize(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        arguments = bound.arguments
        coordinator, notice = coordinator_for(
            arguments.get("coordinator_address"), arguments.get("num_processes"),
            arguments.get("process_id"), world_from_env(),
        )
        if coordinator is not None:
            arguments["coordinator_address"] = coordinator
        if notice is not None:
            sys.stderr.write(notice + "\n")
        return original(*bound.args, **bound.kwargs)

    initialize._elastic_wrapped = True  # type: ignore[attr-defined]
    state.initialize = initialize


def _jax_version() -> str:
    jax = sys.modules.get("jax")
    return str(getattr(jax, "__version__", "")) or "(version unknown)"
