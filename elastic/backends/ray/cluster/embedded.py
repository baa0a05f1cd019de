"""The embedded Ray's one owner: a keeper process under which the whole cluster runs, and which
outlives the driver only to end the cluster.

``--backend ray`` with no cluster to join starts Ray for the run. If the driver started Ray
itself, Ray's processes would be its children, and a driver SIGKILLed (the OOM killer, a
watchdog, ``kill -9``) would leave them to init: the raylet's dashboard and runtime-env agents
outlive it for good when it dies early. So the driver starts a keeper instead: an
:mod:`elastic.node.spawner.process` process (a child subreaper, in a session of its own, sent SIGTERM
by the kernel when the driver's thread that started it dies, whatever killed the driver), and
the keeper starts the head program (:mod:`elastic.backends.ray.cluster.head`), which starts Ray; the
driver joins the cluster at its address like any other. Every process of the cluster (GCS,
raylet, agents, workers, elastic's node agents and their ranks) is then the keeper's
descendant, and an orphan among them is re-parented to the keeper, never to init. When the
driver dies, the keeper SIGKILLs the head's process group and then every child it has, round
after round, until none is left (an unreaped child's pid cannot be reused), and exits.

The head records the keeper's process tree in the run directory as it changes
(:attr:`elastic.core.run_layout.RunLayout.embedded_ray_record`); a driver that takes the run
over stops what is still alive of it (:func:`elastic.node.process_record.stop_recorded`), for
the case where the keeper itself was killed. The cluster's processes inherit
:data:`EMBEDDED_MARK` (the run id) in their environment.

A clean stop: the driver disconnects, has the keeper SIGTERM the head (which shuts Ray down the
way Ray does: its processes in order, the GCS last), waits for the head to exit, then closes the
keeper's pipe: the keeper sweeps whatever is left and exits, and the record is rewritten with no
process in it.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import ray

import elastic
from elastic.backends.protocol import BackendUnavailable
from elastic.core.launch.spec import WorkerSpec
from elastic.core.run_layout import RunLayout
from elastic.node.process_record import read_record, write_record
from elastic.node.spawner.link import SpawnerLink, start_spawner
from elastic.node.spawner.messages import OP_SIGNAL_PROCESS
from elastic.node.logs.tail import read_log_tail

__all__ = ["AUTH_MODE_VAR", "EMBEDDED_MARK", "EmbeddedRay"]

AUTH_MODE_VAR = "RAY_AUTH_MODE"
EMBEDDED_MARK = "ELASTIC_EMBEDDED_RAY"  # inherited by the cluster's processes: the run id

_PACKAGE_ROOT = str(Path(elastic.__file__).resolve().parents[1])
# The head runs the code of this very elastic, whatever else is installed. Its module is
# named first, so that a command line cut short (a leftover's name in the journal) still
# says what the process is.
_HEAD_MODULE = "elastic.backends.ray.cluster.head"
_BOOT = (
    f"m = {_HEAD_MODULE!r}; import importlib, sys; sys.path.insert(0, sys.argv[1]); "
    "sys.exit(importlib.import_module(m).main(sys.argv[2:]))"
)
_KEEPER_START_S = 30.0  # for the keeper to answer, and to start the head
_HEAD_START_S = 180.0  # for Ray to come up in the head (seconds on a loaded machine)
_POLL_S = 0.05
_HEAD_STOP_S = 20.0  # for Ray to shut down on SIGTERM before the keeper SIGKILLs what is left
_KEEPER_STOP_S = 30.0


class EmbeddedRay:
    """A Ray cluster started for this run under its keeper; stopped (all of it) at :meth:`shutdown`.

    Start it with :meth:`start`; ``address`` is then where the driver joins it.
    """

    def __init__(self, record: Path, log: Path, scratch: Path | None, inherited_auth_mode: str | None) -> None:
        self.record = record
        self.log = log
        self.address = ""
        self.session_dir: str | None = None
        # RAY_AUTH_MODE as it was before elastic set it for the embedded instance.
        self.inherited_auth_mode = inherited_auth_mode
        self._scratch = scratch  # a directory of our own for the record and log, when there is no run directory
        self._link: Future[SpawnerLink] = Future()
        self._head: Future[dict[str, Any]] = Future()
        self._head_pid = 0
        self._head_exited = threading.Event()
        self._keeper_gone = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._keep, name="elastic-embedded-ray", daemon=True)

    @classmethod
    def start(cls, run_id: str, run_dir: Path | None, inherited_auth_mode: str | None) -> EmbeddedRay:
        """Start the keeper, the head under it and Ray in the head; return once Ray's address is known.

        The record and the head's log go to the run directory (a temporary one where there is
        none). Raises :class:`BackendUnavailable` (everything started stopped again) when Ray
        does not come up.
        """
        scratch = None
        if run_dir is None:
            run_dir = scratch = Path(tempfile.mkdtemp(prefix="elastic-ray-"))
        layout = RunLayout(run_dir)
        embedded = cls(layout.embedded_ray_record, layout.embedded_ray_log, scratch, inherited_auth_mode)
        try:
            embedded._start(run_id)
        except BaseException:
            embedded.shutdown()
            raise
        return embedded

    def _start(self, run_id: str) -> None:
        self._thread.start()
        try:
            link = self._link.result(_KEEPER_START_S)
        except (OSError, FutureTimeout) as error:
            why = str(error) or f"no answer within {_KEEPER_START_S:.0f} s"
            raise BackendUnavailable(f"cannot start the embedded Ray's keeper (elastic.node.spawner.process): {why}") from error
        env = dict(os.environ)
        env[AUTH_MODE_VAR] = "token"  # the GCS, raylet and workers read it from here
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback only
        env[EMBEDDED_MARK] = run_id
        head = WorkerSpec(
            attempt=0, rank=0, local_rank=0, node_id="embedded-ray",
            argv=(sys.executable, "-c", _BOOT, _PACKAGE_ROOT, str(self.record)),
            env=env, log_path=str(self.log),
        )
        try:
            reply = link.request_spawn(head).result(_KEEPER_START_S)
        except (OSError, FutureTimeout) as error:
            why = str(error) or f"no answer within {_KEEPER_START_S:.0f} s"
            raise BackendUnavailable(f"the embedded Ray's keeper (pid {link.process.pid}) did not start "
                                     f"its head: {why}") from error
        if reply["t"] != "spawned":
            raise BackendUnavailable(
                f"cannot start the embedded Ray's head ({sys.executable}): {os.strerror(int(reply['errno']))}"
            )
        self._head_pid = int(reply["pid"])
        deadline_at = time.monotonic() + _HEAD_START_S
        while True:
            fields, _ = read_record(self.record)
            if fields.get("address") and fields.get("keeper") == link.process.pid:
                self.address = str(fields["address"])
                self.session_dir = fields.get("session_dir")
                return
            if self._head_exited.is_set() or self._keeper_gone.is_set():
                last = next((line for line in reversed(read_log_tail(self.log, 20)) if line.strip()), "")
                raise BackendUnavailable(f"the embedded Ray did not start ({self.log} ends: {last.strip()})")
            if time.monotonic() >= deadline_at:
                raise BackendUnavailable(
                    f"the embedded Ray did not start within {_HEAD_START_S:.0f} s (its log: {self.log})"
                )
            time.sleep(_POLL_S)

    # -- the keeper's thread ---------------------------------------------------------------

    def _keep(self) -> None:
        """Start the keeper and read its reports until it exits.

        This thread lives exactly as long as the keeper: the keeper's parent-death signal fires
        when the thread that started it ends, and this one ends only once the keeper has.
        """
        try:
            link = start_spawner(use_cgroup=False)
        except BaseException as error:
            self._link.set_exception(error)
            self._keeper_gone.set()
            return
        self._link.set_result(link)
        link.read_reports(self._on_exit)
        self._head_exited.set()
        self._keeper_gone.set()

    def _on_exit(self, pid: int, returncode: int) -> None:
        if pid == self._head_pid:
            self._head_exited.set()

    # -- stopping ----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Disconnect, let Ray shut down in the head, then the keeper sweeps and exits. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            ray.shutdown()
        finally:
            self._stop_keeper()

    def _stop_keeper(self) -> None:
        if self._link.done() and self._link.exception() is None:
            link = self._link.result()
            if self._head_pid and not self._head_exited.is_set():
                link.send_signal(OP_SIGNAL_PROCESS, self._head_pid, signal.SIGTERM)
                self._head_exited.wait(_HEAD_STOP_S)
            link.close(_KEEPER_STOP_S)  # SIGKILLs a keeper that does not exit by then
            self._thread.join(_KEEPER_STOP_S)
        self._forget_processes()
        if self.session_dir:
            shutil.rmtree(self.session_dir, ignore_errors=True)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        if self.inherited_auth_mode is None:
            os.environ.pop(AUTH_MODE_VAR, None)
        else:
            os.environ[AUTH_MODE_VAR] = self.inherited_auth_mode

    def _forget_processes(self) -> None:
        """The record, with no process left in it: what a later driver of the run need not stop."""
        fields, _ = read_record(self.record)
        if not fields:
            return
        try:
            write_record(self.record, fields, [])
        except OSError:
            pass  # a full disk: a later driver checks each recorded process before it stops one
