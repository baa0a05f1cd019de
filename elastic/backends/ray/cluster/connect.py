"""Joining a Ray cluster or embedding one, with Ray's token authentication kept on.

Token authentication arrived in Ray 2.52.0 (the minimum in pyproject.toml):
``RAY_AUTH_MODE=token`` makes every RPC and HTTP entry point of the cluster
demand a shared token. An embedded Ray sets it itself, whatever the inherited
environment says, and checks after start that it is on. Joining a cluster
without it warns, on every Ray version.
"""

from __future__ import annotations

import os
from pathlib import Path

import ray
import ray.exceptions
import structlog

from elastic.backends.protocol import BackendUnavailable
from elastic.backends.ray.cluster.address import cluster_record, wait_until_reachable
from elastic.backends.ray.cluster.embedded import AUTH_MODE_VAR, EmbeddedRay
from elastic.core.events import LogEvent

__all__ = ["AUTH_MODE_VAR", "NAMESPACE", "EmbeddedRay", "auth_mode", "connect"]

NAMESPACE = "elastic"  # agents are named actors here, so `elastic stack` can find them
_TOKEN = "token"
# Ray's own modes that demand a credential on every call: a static token, or
# (newer Ray, on Kubernetes) a service-account token.
_AUTHENTICATED_MODES = ("TOKEN", "K8S")
_AUTHENTICATED = tuple(name.lower() for name in _AUTHENTICATED_MODES)
_PROBE_TIMEOUT_S = 60.0

_log = structlog.get_logger("elastic.ray")


def auth_mode() -> str | None:
    """The authentication mode this process speaks to Ray with (``token``, ``disabled``, ...),
    or ``None`` when the installed Ray cannot tell (no token-auth API: older than 2.52)."""
    try:
        from ray._raylet import (  # type: ignore[attr-defined]
            AuthenticationMode,
            get_authentication_mode,
        )
    except ImportError:
        return None
    mode = get_authentication_mode()
    for name in _AUTHENTICATED_MODES:
        if getattr(AuthenticationMode, name, object()) == mode:
            return name.lower()
    return "disabled"


def connect(address: str | None, *, run_id: str = "run", run_dir: Path | None = None) -> EmbeddedRay | None:
    """Join ``address``, else ``RAY_ADDRESS``, else a ``ray start`` cluster here, else embed.

    A named address must accept a connection within seconds (a one-line error naming where it
    came from otherwise: Ray would retry it for minutes); a ``ray start`` record whose address
    accepts none is stale, said in a warning, and ignored.

    The embedded instance (:class:`~elastic.backends.ray.cluster.embedded.EmbeddedRay`: Ray under a
    keeper process that ends all of it when this process dies, its record in ``run_dir``)
    listens on loopback only, has no dashboard (its job API is unauthenticated) and has Ray's
    token authentication on: elastic sets ``RAY_AUTH_MODE=token`` for it (an inherited
    ``disabled`` is overridden) and refuses to run if Ray did not turn it on. This process then
    joins it at its address.
    """
    target, named = (address, "--address") if address else (os.environ.get("RAY_ADDRESS") or None, "RAY_ADDRESS")
    shown = target  # the address an error names ("auto" is Ray's word for the record's)
    if target is None:
        record = cluster_record()
        if record is not None and not record.stale:
            target, named, shown = "auto", str(record.path), record.address
        elif record is not None:
            _log.warning(
                LogEvent.STALE_RAY_CLUSTER_RECORD_IGNORED.value,
                file=str(record.path),
                address=record.address,
                detail=f"ignoring {record.path}: no Ray cluster answers at {record.address or 'its address'} "
                f"({record.unreachable}), left by a `ray start` that ended without `ray stop`; "
                "starting an embedded Ray",
            )
    if target is not None:
        if (why := wait_until_reachable(target)) is not None:
            raise BackendUnavailable(f"{named}: no Ray cluster answers at {target} ({why})")
        try:
            ray.init(address=target, namespace=NAMESPACE, configure_logging=False, log_to_driver=False)
        except (ConnectionError, ValueError) as error:
            raise BackendUnavailable(f"{named}: cannot reach the Ray cluster at {shown}: {error}") from error
        _warn_if_unauthenticated()
        return None
    inherited = os.environ.get(AUTH_MODE_VAR)
    # Read by ray.init in this process; the head's Ray gets it in its environment too.
    os.environ[AUTH_MODE_VAR] = _TOKEN
    _refresh_ray_config()
    embedded = EmbeddedRay.start(run_id, run_dir, inherited)
    try:
        ray.init(address=embedded.address, namespace=NAMESPACE, _node_ip_address="127.0.0.1",
                 configure_logging=False, log_to_driver=False)
        mode = _effective_auth_mode()
    except BaseException:
        embedded.shutdown()
        raise
    if mode not in _AUTHENTICATED:
        embedded.shutdown()
        raise BackendUnavailable(
            f"the embedded Ray started without token authentication (mode: {mode or 'unknown'}); "
            f"elastic needs Ray >= 2.52 with {AUTH_MODE_VAR}=token to run it safely"
        )
    if inherited is not None and inherited.lower() != _TOKEN:
        _log.warning(
            LogEvent.RAY_AUTH_MODE_OVERRIDDEN.value,
            inherited=inherited,
            detail=f"the embedded Ray always has token authentication on; {AUTH_MODE_VAR}="
            f"{inherited} applies only to clusters elastic joins",
        )
    return embedded


def _refresh_ray_config() -> None:
    """Make this process's cached Ray config see the ``RAY_AUTH_MODE`` just set.

    Ray reads its config from the environment once per process; a driver that
    touched Ray before (a test, a notebook) would keep the old mode otherwise.
    """
    try:
        from ray._raylet import Config  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - every supported Ray has it
        return
    Config.initialize("")


def _cluster_auth_mode() -> str | None:
    """The mode the cluster's own processes run with, asked of a task on it.

    A driver with token authentication on also talks to a cluster that has it
    off (Ray turns it on by itself when ``~/.ray/auth_token`` exists), so the
    driver's own mode proves nothing; a worker inherits its raylet's.
    """
    probe = ray.remote(num_cpus=0, max_retries=0)(auth_mode)
    try:
        mode: str | None = ray.get(probe.remote(), timeout=_PROBE_TIMEOUT_S)
    except ray.exceptions.RayError as error:
        _log.warning(LogEvent.CLUSTER_AUTH_PROBE_FAILED.value, error=type(error).__name__)
        return None
    return mode


def _effective_auth_mode() -> str | None:
    """The cluster's mode: ``disabled`` as soon as this driver's is (a cluster that demands
    a token refuses a driver without one), else what the cluster's processes say."""
    mode = auth_mode()
    return _cluster_auth_mode() if mode in _AUTHENTICATED else mode


def _warn_if_unauthenticated() -> None:
    """Warn when the joined cluster does not demand a token, or when Ray cannot say."""
    mode = _effective_auth_mode()
    if mode in _AUTHENTICATED:
        return
    if mode is None:
        detail = (
            f"cannot tell whether this Ray cluster has token authentication on (Ray "
            f"{ray.__version__}; it came in 2.52): if it is off, anyone who can reach the "
            f"cluster can run code on it; start it with {AUTH_MODE_VAR}=token"
        )
    else:
        detail = (
            "this Ray cluster has token authentication off: anyone who can reach it can run "
            f"code on it; start it with {AUTH_MODE_VAR}=token"
        )
    _log.warning(LogEvent.UNAUTHENTICATED_CLUSTER_JOINED.value, detail=detail)
