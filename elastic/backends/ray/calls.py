"""The one place Ray's errors become values: every Ray call of the backend goes through here.

A call returns :data:`Result`: :class:`Ok` with the value, or a failure the
caller must handle (:class:`NodeLost`, :class:`Unreachable`,
:class:`AgentFailed`, :class:`RayLost`); none of Ray's exceptions reach the
driver. Transient errors (an actor briefly unavailable, an RPC timeout, the
GCS restarting) are retried with tenacity, and every call is bounded in total,
timeouts included.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeGuard, TypeVar, Union

import ray
import ray.exceptions
import structlog
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from elastic.core.events import LogEvent

__all__ = [
    "AgentFailed",
    "Failed",
    "NodeLost",
    "Ok",
    "RayLost",
    "Result",
    "Unreachable",
    "call",
    "cluster_nodes",
    "draining_nodes",
    "failed",
    "gather",
    "is_failed",
    "result_of",
    "rpc_retrying",
    "submit",
    "wait_any",
]

T = TypeVar("T")
K = TypeVar("K")

_ATTEMPT_TIMEOUT_S = 30.0  # one try of one call, at most
_CALL_BUDGET_S = 90.0  # every try of one call together, waits included
_CLUSTER_BUDGET_S = 60.0  # reading the node table while the GCS restarts
_DRAINING_TIMEOUT_S = 2.0  # one look at the draining nodes

_log = structlog.get_logger("elastic.ray")


@dataclass(frozen=True)
class Ok(Generic[T]):
    value: T


@dataclass(frozen=True)
class NodeLost:
    """The agent or its node is dead, or the agent can no longer be placed there."""

    error: str


@dataclass(frozen=True)
class Unreachable:
    """Still no answer once the retries of transient errors ran out (timeouts included)."""

    error: str


@dataclass(frozen=True)
class AgentFailed:
    """The agent's own code raised: its ``__init__`` (its node's environment) or a method."""

    error: str


@dataclass(frozen=True)
class RayLost:
    """The driver lost Ray itself (its local raylet died): no node can be reached."""

    error: str


Failed = Union[NodeLost, Unreachable, AgentFailed, RayLost]
Result = Union[Ok[T], NodeLost, Unreachable, AgentFailed, RayLost]


def is_failed(value: object) -> TypeGuard[Failed]:
    """Whether ``value`` is one of the failures (not an ``Ok``, an ObjectRef or a handle)."""
    return isinstance(value, NodeLost | Unreachable | AgentFailed | RayLost)


def _one_line(error: BaseException) -> str:
    """``Type: message`` on one line; for an error raised on a node, its own last line."""
    if isinstance(error, ray.exceptions.RayTaskError):
        cause = error.cause
        if cause is not None and not isinstance(cause, ray.exceptions.RayError):
            return f"{type(cause).__name__}: {cause}".splitlines()[0]
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if _init_failed(error) and lines:
        return lines[-1]  # the traceback's last line: the agent's own error
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _init_failed(error: BaseException) -> bool:
    """An actor that died in its ``__init__`` (an error raised by an actor method and
    re-raised as an instance of its own class lacks the flag: not an init failure)."""
    return isinstance(error, ray.exceptions.RayActorError) and bool(
        getattr(error, "actor_init_failed", False)
    )


def failed(error: BaseException) -> Failed | None:
    """What a Ray error means for the caller; ``None`` for an error that is not Ray's.

    An actor or node dead, or an actor that can no longer be placed on its
    pinned node: :class:`NodeLost` (a node-lost failure). Briefly unavailable,
    or an RPC timeout: :class:`Unreachable` (retried first; never a failure
    kind of its own). An agent whose ``__init__`` or method raised:
    :class:`AgentFailed` (launch-failed). The driver losing its own raylet:
    :class:`RayLost`, which is no node's failure.
    """
    text = _one_line(error)
    if isinstance(error, ray.exceptions.LocalRayletDiedError | ray.exceptions.RaySystemError):
        return RayLost(text)
    if _init_failed(error):
        return AgentFailed(text)
    if _is_transient(error):
        return Unreachable(text)
    if isinstance(
        error,
        ray.exceptions.ActorDiedError
        | ray.exceptions.ActorUnschedulableError
        | ray.exceptions.NodeDiedError
        | ray.exceptions.RayActorError,
    ):
        return NodeLost(text)
    if isinstance(error, ray.exceptions.RayTaskError):
        return AgentFailed(text)
    if isinstance(error, ray.exceptions.RayError):
        return Unreachable(text)
    return None


def _is_transient(error: BaseException) -> bool:
    return isinstance(
        error,
        ray.exceptions.ActorUnavailableError | ray.exceptions.GetTimeoutError | ray.exceptions.RpcError,
    )


def _gcs_away(error: BaseException) -> bool:
    """An error reading cluster state that a GCS coming back would cure."""
    return isinstance(error, ray.exceptions.RayError | ConnectionError | TimeoutError) and not isinstance(
        error, ray.exceptions.LocalRayletDiedError
    )


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome else None
    _log.warning(LogEvent.RPC_RETRIED.value, attempt=state.attempt_number, error=type(error).__name__)


def rpc_retrying(budget_s: float = _CALL_BUDGET_S, max_attempts: int = 5) -> Retrying:
    """Retries while Ray says the actor is briefly away; at most ``budget_s`` in all."""
    return Retrying(
        retry=retry_if_exception(_is_transient),
        stop=stop_after_attempt(max_attempts) | stop_after_delay(budget_s),
        wait=wait_exponential(multiplier=0.1, max=2.0),
        before_sleep=_log_retry,
        reraise=True,
    )


def call(method: Any, *args: Any, budget_s: float = _CALL_BUDGET_S) -> Result[Any]:
    """``ray.get`` of one idempotent actor call, retried while transient, within ``budget_s``.

    A try waits at most a third of the budget (so a timeout is retried) and
    never past it, so a timeout is bounded too.
    """
    deadline_at = time.monotonic() + budget_s
    try_s = min(_ATTEMPT_TIMEOUT_S, budget_s / 3)
    try:
        for attempt in rpc_retrying(budget_s):
            with attempt:
                timeout_s = max(0.1, min(try_s, deadline_at - time.monotonic()))
                return Ok(ray.get(method.remote(*args), timeout=timeout_s))
    except ray.exceptions.RayError as error:
        return _failed(error)
    raise AssertionError("unreachable")  # pragma: no cover


def submit(method: Any, *args: Any) -> Any:
    """``method.remote(*args)``: its ObjectRef, or the failure when Ray refuses the call."""
    try:
        return method.remote(*args)
    except ray.exceptions.RayError as error:
        return _failed(error)


def gather(refs: Mapping[K, Any], deadline_at: float, clock: Callable[[], float]) -> dict[K, Result[Any]]:
    """The results of calls already made, all waited for under one deadline (no retries).

    ``refs`` values are ObjectRefs, or a failure already (from :func:`submit`).
    A call with no answer by the deadline is :class:`Unreachable`.
    """
    results: dict[K, Result[Any]] = {
        key: ref for key, ref in refs.items() if is_failed(ref)
    }
    pending = {ref: key for key, ref in refs.items() if key not in results}
    ready: list[Any] = []
    if pending:
        try:
            ready, _ = ray.wait(
                list(pending), num_returns=len(pending), timeout=max(0.0, deadline_at - clock())
            )
        except ray.exceptions.RayError as error:
            lost = _failed(error)
            return {**results, **{key: lost for key in pending.values()}}
    for ref in ready:
        try:
            results[pending[ref]] = Ok(ray.get(ref))
        except ray.exceptions.RayError as error:
            results[pending[ref]] = _failed(error)
    for key in pending.values():
        results.setdefault(key, Unreachable("no answer before the deadline"))
    return results


def cluster_nodes(budget_s: float = _CLUSTER_BUDGET_S) -> Result[list[dict[str, Any]]]:
    """Ray's node table, retried while the GCS is away (restarting), within ``budget_s``."""
    retrying = Retrying(
        retry=retry_if_exception(_gcs_away),
        stop=stop_after_delay(budget_s),
        wait=wait_exponential(multiplier=0.2, max=5.0),
        before_sleep=_log_retry,
        reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
                return Ok(nodes)
    except (ray.exceptions.RayError, ConnectionError, TimeoutError) as error:
        return _failed(error)
    raise AssertionError("unreachable")  # pragma: no cover


def draining_nodes(timeout_s: float = _DRAINING_TIMEOUT_S) -> Result[dict[str, int]]:
    """Nodes Ray is draining (an autoscaler or KubeRay about to take them, or ``ray
    drain-node``): node id -> deadline in Unix milliseconds, 0 when none was given.

    One GCS call, not retried: the caller looks again a moment later. Ray keeps
    this table in its GCS client (``get_draining_nodes``), not in ``ray.nodes()``.
    """
    try:
        client = ray._private.worker.global_worker.gcs_client  # type: ignore[attr-defined]
        table = client.get_draining_nodes(timeout=timeout_s)
    except (ray.exceptions.RayError, ConnectionError, TimeoutError) as error:
        return _failed(error)
    except AttributeError as error:  # not connected (any more): no GCS client to ask
        return RayLost(f"{type(error).__name__}: {error}")
    return Ok({str(node): int(deadline_ms) for node, deadline_ms in table.items()})


def _failed(error: BaseException) -> Failed:
    value = failed(error)
    return value if value is not None else Unreachable(_one_line(error))


def wait_any(refs: list[Any], timeout_s: float) -> list[Any]:
    """The refs among ``refs`` that are ready within ``timeout_s`` (at least one, if any).

    Raises what Ray raises: a failure of ``ray.wait`` itself is the driver's Ray
    failing, for the caller's supervisor to turn into a fault.
    """
    ready, _ = ray.wait(refs, num_returns=1, timeout=timeout_s)
    return list(ready)


def result_of(ref: Any) -> Result[Any]:
    """The value of a ready call, or its failure."""
    try:
        return Ok(ray.get(ref))
    except ray.exceptions.RayError as error:
        return _failed(error)
