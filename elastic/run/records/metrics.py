"""Prometheus metrics of a run: the driver's snapshot, a pure text renderer and a small loopback HTTP server."""

from __future__ import annotations

import errno
import math
import socket
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from elastic.core.failures import FailureKind
from elastic.core.journal.ledger import BADPUT_CAUSES, run_ledger
from elastic.core.controller.machine import Phase
from elastic.core.options.values import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from elastic.core.controller.controller import Controller
    from elastic.core.launch.plan import AttemptPlan
    from elastic.core.checkpoints.selection import Checkpoint
    from elastic.run.records.recorder import Recorder

__all__ = ["MetricsServer", "RunMetrics", "bind_metrics", "render_metrics", "run_snapshot"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class RunMetrics:
    """One snapshot of what the driver knows, ready to render."""

    run_id: str
    phase: Phase
    attempt: int
    world_size: int
    ranks_alive: int
    restarts_by_kind: Mapping[str, int]
    failures_by_kind: Mapping[str, int]
    budget_left: Mapping[str, int | None]
    checkpoint_step: int | None
    # The ledger's productive training over wall time, up to now (the summary's and the report's
    # figure); None until a training step is known.
    productive_share: float | None
    heartbeat_age_s: Mapping[int, float] = field(default_factory=dict)
    ledger: Mapping[str, float] = field(default_factory=dict)  # the run's goodput ledger, up to now
    step_by_rank: Mapping[int, int] = field(default_factory=dict)  # the current attempt's, as reported
    step_time_by_rank: Mapping[int, float] = field(default_factory=dict)  # over each rank's last 16 steps
    stragglers: tuple[tuple[int, str], ...] = ()  # (rank, node) of the current attempt's stragglers


def run_snapshot(
    run_id: str,
    controller: Controller,
    recorder: Recorder,
    plan: AttemptPlan | None,
    checkpoint: Checkpoint | None,
    now: float,
    heartbeat_ages: Mapping[int, float],
) -> RunMetrics:
    """What the driver knows at ``now`` (monotonic): the controller's state and the journal's fold
    up to now (read under the recorder's lock, so safe from any thread)."""
    restarts: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    with recorder.fold_lock:
        since_start = recorder.fold.since_start(now + recorder.wall_offset_s)
        attempts = recorder.fold.closed(since_start)
        for attempt in attempts:
            failures.update(kind.value for kind in attempt.failure_kinds())
            if attempt.restarted:
                cause = attempt.root_cause
                other = (
                    "preemption-notice" if attempt.notice is not None
                    else "straggler" if attempt.straggler_restart else "scale-up"
                )
                restarts[cause.kind.value if cause else other] += 1
        current = recorder.fold.attempts.get(controller.attempt)
        stragglers = tuple(
            (int(s["rank"]), str(s["node"])) for s in (current.stragglers if current else ())
        )
        up_to_now = run_ledger(recorder.fold, since_start)
        ledger = up_to_now.run.to_dict()
        share = up_to_now.productive_share
    policy = controller.policy
    return RunMetrics(
        run_id=run_id,
        phase=controller.phase,
        attempt=controller.attempt,
        world_size=plan.world_size if plan else 0,
        ranks_alive=controller.ranks_alive,
        restarts_by_kind=restarts,
        failures_by_kind=failures,
        budget_left={
            "failures": policy.failures.remaining(now),
            "preemptions": policy.preemptions.remaining(now),
        },
        checkpoint_step=checkpoint.step if checkpoint else None,
        productive_share=share,
        ledger=ledger,
        heartbeat_age_s=heartbeat_ages,
        step_by_rank=dict(controller.rank_steps),
        step_time_by_rank=dict(controller.rank_step_times),
        stragglers=stragglers,
    )


def _number(value: float | int | None) -> str:
    if value is None:
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "+Inf"
    return repr(float(value)) if isinstance(value, float) else str(value)


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(m: RunMetrics) -> str:
    """The Prometheus text exposition format (version 0.0.4)."""
    run = f'run_id="{_label(m.run_id)}"'
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float | int | None]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            joined = ",".join(x for x in (run, labels) if x)
            lines.append(f"{name}{{{joined}}} {_number(value)}")

    family("elastic_phase", "gauge", "1 for the driver's current phase, 0 for the others.",
           [(f'phase="{p.value}"', int(p is m.phase)) for p in Phase])
    family("elastic_attempt", "gauge", "Number of the current attempt (0 first).", [("", m.attempt)])
    family("elastic_world_size", "gauge", "Ranks in the current attempt.", [("", m.world_size)])
    family("elastic_ranks_alive", "gauge", "Ranks of the current attempt still running.",
           [("", m.ranks_alive)])
    kinds = [k.value for k in FailureKind]
    family("elastic_restarts_total", "counter", "Restarts of the group, by the root cause's kind.",
           [(f'kind="{k}"', m.restarts_by_kind.get(k, 0)) for k in [*kinds, "scale-up", "preemption-notice", "straggler"]])
    family("elastic_failures_total", "counter", "Worker failures observed, by kind.",
           [(f'kind="{k}"', m.failures_by_kind.get(k, 0)) for k in kinds])
    family("elastic_budget_remaining", "gauge", "Restarts left in each budget's window (+Inf: unlimited).",
           [(f'budget="{b}"', math.inf if left is None else left) for b, left in sorted(m.budget_left.items())])
    family("elastic_checkpoint_step", "gauge", "Step of the latest complete checkpoint (NaN: none).",
           [("", m.checkpoint_step)])
    family("elastic_goodput_ratio", "gauge",
           "Productive training (the goodput ledger) over wall time, up to now; NaN until a step is known.",
           [("", m.productive_share)])
    family("elastic_goodput_seconds_total", "counter",
           "Seconds of productive training (the goodput ledger), up to now.",
           [("", m.ledger.get("productive", 0.0))])
    family("elastic_badput_seconds_total", "counter",
           "Seconds not spent training productively, by cause (the goodput ledger), up to now.",
           [(f'cause="{c}"', m.ledger.get(c, 0.0)) for c in BADPUT_CAUSES])
    family("elastic_heartbeat_age_seconds", "gauge", "Seconds since each rank's last heartbeat.",
           [(f'rank="{r}"', age) for r, age in sorted(m.heartbeat_age_s.items())])
    family("elastic_step", "gauge",
           "Each rank's highest training step in the current attempt (output, heartbeat or the Trainer's state).",
           [(f'rank="{r}"', step) for r, step in sorted(m.step_by_rank.items())])
    family("elastic_step_time_seconds", "gauge",
           "Each rank's mean step time over its last 16 steps (compute_s if given, else its step interval).",
           [(f'rank="{r}"', seconds) for r, seconds in sorted(m.step_time_by_rank.items())])
    family("elastic_straggler", "gauge", "1 for each rank of the current attempt found straggling, with its node.",
           [(f'rank="{r}",node="{_label(n)}"', 1) for r, n in m.stragglers])
    return "\n".join(lines) + "\n"


class MetricsServer:
    """Serves ``GET /metrics`` from a snapshot function on its own thread; loopback by default.

    Made, it holds its port (so a port in use fails before the run starts); :meth:`serve`
    starts answering with the driver's snapshots.
    """

    def __init__(self, *, host: str, port: int) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = render_metrics(outer._snapshot()).encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # scrapes are not events

        self._snapshot: Callable[[], RunMetrics] = _not_serving
        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="elastic-metrics", daemon=True)
        self._closed = False

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def serve(self, snapshot: Callable[[], RunMetrics]) -> None:
        """Answer scrapes with ``snapshot()`` from now on."""
        self._snapshot = snapshot
        self._thread.start()

    def close(self) -> None:
        """Stop serving and free the port; again, or never served, it does nothing more."""
        if self._closed:
            return
        self._closed = True
        serving = self._thread.is_alive()
        if serving:
            self._server.shutdown()  # waits for serve_forever to return: only once it was started
        self._server.server_close()
        if serving:
            self._thread.join(timeout=5)


def _not_serving() -> RunMetrics:
    raise RuntimeError("the metrics server answers no scrape before serve()")


def bind_metrics(host: str, port: int) -> MetricsServer:
    """A :class:`MetricsServer` holding ``host:port``, not serving yet.

    :raises ConfigError: naming ``--metrics-host`` or ``--metrics-port`` and why, when the
        address cannot be bound (a port in use, a host that resolves nowhere).
    """
    try:
        return MetricsServer(host=host, port=port)
    except socket.gaierror as error:
        raise ConfigError(
            "--metrics-host", f"cannot resolve {host!r} to an IPv4 address: {error.strerror}"
        ) from None
    except (UnicodeError, ValueError) as error:  # a name IDNA cannot encode, a NUL in it
        raise ConfigError("--metrics-host", f"{host!r} is not a host name or address: {error}") from None
    except OSError as error:
        cause = error.strerror or str(error)
        if error.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise ConfigError(
                "--metrics-host", f"cannot serve metrics on {host}:{port}: {cause} (not an address of this machine)"
            ) from None
        raise ConfigError(
            "--metrics-port", f"cannot serve metrics on {host}:{port}: {cause} (give another port, or 0 for any free one)"
        ) from None
