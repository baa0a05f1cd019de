"""The embedded Ray's head process: starts Ray for one run, records what of it runs, stops it on SIGTERM.

:class:`elastic.backends.ray.cluster.embedded.EmbeddedRay` runs this program under a process of its own,
the keeper (an :mod:`elastic.node.spawner.process`), as ``python -c BOOT ROOT RECORD``. Ray's head
processes (GCS, raylet, the raylet's dashboard and runtime-env agents, its workers) are started
here, so they are the keeper's descendants: when the driver dies, the keeper SIGKILLs them all.

From its first moment to its last, a thread writes RECORD (:mod:`elastic.node.process_record`):
the keeper's whole process tree (the keeper, this process, everything Ray started, elastic's node
agents and their ranks) whenever it changes, looked at every :data:`RECORD_S`, and, once Ray is
up, the cluster's address and session directory. The driver waits for the address there; a
driver that takes the run over stops what a dead keeper could not (``stop_recorded``).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import ray

from elastic.node.process_record import RecordedProcess, process_tree, write_record

__all__ = ["RECORD_S", "main"]

RECORD_S = 0.5  # how often the process tree is looked at for the record


class _Recorder(threading.Thread):
    """Rewrites the record whenever the keeper's tree or the fields change."""

    def __init__(self, path: Path, keeper: int) -> None:
        super().__init__(name="elastic-ray-head-record", daemon=True)
        self._path = path
        self._keeper = keeper
        self._fields: dict[str, Any] = {"keeper": keeper, "address": None, "session_dir": None}
        self._written: tuple[dict[str, Any], tuple[tuple[int, int], ...]] | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()

    def update(self, **fields: Any) -> None:
        """New fields, written at once."""
        with self._lock:
            self._fields.update(fields)
        self.write()

    def write(self) -> None:
        with self._lock:
            if os.getppid() != self._keeper:
                return  # the keeper is gone: so are we, any moment (our parent-death signal)
            tree: list[RecordedProcess] = process_tree(self._keeper)
            state = (dict(self._fields), tuple((p.pid, p.started) for p in tree))
            if state == self._written:
                return
            try:
                write_record(self._path, self._fields, tree)
            except OSError as error:  # a full disk: the driver's own writes will say so
                print(f"elastic: cannot write {self._path}: {error}", file=sys.stderr, flush=True)
                return
            self._written = state

    def run(self) -> None:
        while not self._wake.wait(RECORD_S):
            self.write()


def main(argv: list[str]) -> int:
    """``RECORD``: start Ray, record, wait for SIGTERM, shut Ray down."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    recorder = _Recorder(Path(argv[0]), os.getppid())
    recorder.write()
    recorder.start()
    try:
        # RAY_AUTH_MODE=token comes in the environment the driver gave us. "local": a new
        # instance, never the cluster a stale /tmp/ray/ray_current_cluster names.
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                 configure_logging=False, log_to_driver=False)
    except Exception:
        traceback.print_exc()
        return 1
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # ray.init installs its own
    node = getattr(ray._private.worker, "_global_node", None)
    session_dir = node.get_session_dir_path() if node is not None else None
    recorder.update(address=ray.get_runtime_context().gcs_address, session_dir=session_dir)
    print(f"elastic: embedded Ray up: session {session_dir}", flush=True)
    while not stop.wait(1.0):
        pass
    ray.shutdown()
    if session_dir:
        shutil.rmtree(session_dir, ignore_errors=True)
    return 0
