"""A real two-node Slurm cluster on loopback for the Slurm tests: munged, slurmctld, two slurmd.

Every daemon runs in the foreground as a child of the test process, with its
own key, sockets, state and logs under one directory; the client commands
(``sbatch``, ``scontrol``, ``scancel``) reach it through ``SLURM_CONF``. Both
nodes are this host (``NodeAddr=127.0.0.1``, each slurmd on its own port).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BINARIES", "NODES", "SlurmCluster", "missing_binaries"]

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "srun")
NODES = ("n1", "n2")
_START_TIMEOUT_S = 60.0


def missing_binaries() -> list[str]:
    """The Slurm and munge programs this machine lacks (Debian: slurm-wlm, munge)."""
    return [name for name in BINARIES if _which(name) is None]


def _which(name: str) -> str | None:
    """``name`` on the PATH, or in the sbin directories a non-login PATH may lack."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _sbin(name: str) -> str:
    found = _which(name)
    assert found is not None, name
    return found


@dataclass
class SlurmCluster:
    """munged, slurmctld and one slurmd per node of :data:`NODES`, all under ``root``."""

    root: Path
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the client commands aimed here."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        return env

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        munge = self.root / "munge"
        munge.mkdir(mode=0o700, exist_ok=True)
        key = munge / "munge.key"
        subprocess.run([_sbin("mungekey"), "-c", "-k", str(key)], check=True, capture_output=True)
        socket_path = munge / "munge.socket"
        self._spawn(
            [
                _sbin("munged"), "--foreground", "--force",
                f"--socket={socket_path}", f"--key-file={key}",
                f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
            "munged",
        )
        self._wait(socket_path.exists, "munged's socket")
        (self.root / "state").mkdir(exist_ok=True)
        for node in NODES:
            (self.root / "spool" / node).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(self._config(socket_path))
        self._spawn([_sbin("slurmctld"), "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._wait(lambda: self._scontrol_ok(["ping"], "UP"), "slurmctld to answer")
        for node in NODES:
            self._spawn([_sbin("slurmd"), "-D", "-N", node, "-f", str(self.conf)], f"slurmd-{node}")
        self._wait(self._nodes_idle, "both nodes idle")

    def pids(self) -> set[int]:
        return {daemon.pid for daemon in self.daemons}

    def scontrol(self, *args: str) -> str:
        return self.run("scontrol", *args).stdout

    def run(self, *argv: str, check: bool = True, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=self.env(), capture_output=True, text=True, check=check, timeout=timeout_s
        )

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job`` as fields (``JobState``, ``ExitCode``, ``Restarts``...)."""
        text = self.run("scontrol", "-o", "show", "job", str(job_id)).stdout
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def logs(self) -> str:
        """The daemons' logs, for a failed test's message."""
        parts = []
        for path in sorted(self.root.glob("*.log")):
            parts.append(f"--- {path.name} ---\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel the jobs still there (a failed test's), then SIGTERM each daemon by pid (slurmd
        first) and SIGKILL what is left: a job's slurmstepd outlives a stopped slurmd."""
        if self.daemons and all(daemon.poll() is None for daemon in self.daemons):
            self.run("scancel", "--partition=debug", check=False, timeout_s=15.0)
            deadline_at = time.monotonic() + 30.0
            while time.monotonic() < deadline_at:
                queue = self.run("squeue", "--noheader", check=False, timeout_s=15.0)
                if queue.returncode != 0 or not queue.stdout.strip():
                    break
                time.sleep(0.5)
        for daemon in reversed(self.daemons):
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(10)
        self.daemons.clear()

    def _config(self, munge_socket: Path) -> str:
        ctld_port = _free_port()
        nodes = "\n".join(
            f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={_free_port()} "
            f"CPUs=1 RealMemory=1000 State=UNKNOWN"
            for node in NODES
        )
        root = self.root
        # cred_expire: a requeued job waits this long (+1 s) before it may start again (default 120).
        # KillWait: between a job's SIGTERM (scancel, a requeue) and SIGKILL (Slurm's default is
        # 30 s): time for elastic to drain and end its run as stopped, whose Ray nodes Slurm stopped
        # with it (its agents unreachable: about 7 s here on a quiet machine, over 20 s beside a
        # parallel test run's other workers). It ends as soon as elastic does.
        return f"""\
ClusterName=elastictest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket},cred_expire=10
CredType=cred/munge
StateSaveLocation={root / 'state'}
SlurmdSpoolDir={root / 'spool'}/%n
SlurmctldPidFile={root / 'slurmctld.pid'}
SlurmdPidFile={root / 'slurmd-%n.pid'}
SlurmctldLogFile={root / 'slurmctld.log'}
SlurmdLogFile={root / 'slurmd-%n.log'}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
MpiDefault=none
SwitchType=switch/none
LaunchParameters=use_interactive_step
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
JobRequeue=1
KillWait=60
MinJobAge=600
MessageTimeout=10
SlurmdTimeout=60
InactiveLimit=0
Waittime=0
SlurmdParameters=config_overrides
{nodes}
PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""

    def _spawn(self, argv: Sequence[str], name: str) -> None:
        with (self.root / f"{name}.out").open("wb") as out:
            self.daemons.append(
                subprocess.Popen(
                    list(argv), env=self.env(), stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, cwd=self.root,
                )
            )

    def _scontrol_ok(self, args: list[str], expected: str) -> bool:
        result = self.run("scontrol", *args, check=False, timeout_s=15.0)
        return result.returncode == 0 and expected in result.stdout

    def _nodes_idle(self) -> bool:
        result = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False, timeout_s=15.0)
        states = dict(line.split() for line in result.stdout.splitlines() if line.strip())
        return all(states.get(node, "").startswith("idle") for node in NODES)

    def _wait(self, ready: object, what: str) -> None:
        assert callable(ready)
        deadline_at = time.monotonic() + _START_TIMEOUT_S
        while not ready():
            for daemon in self.daemons:
                if daemon.poll() is not None:
                    raise RuntimeError(f"a Slurm daemon exited while waiting for {what}:\n{self.logs()}")
            if time.monotonic() >= deadline_at:
                raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")
            time.sleep(0.2)
