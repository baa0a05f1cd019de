"""torchft as its users run it on one machine: a lighthouse, and a torchrun (``--max-restarts``) per replica group.

    python benchmarks/goodput/torchft_job.py LOG_DIR [REPLICAS]

Starts ``torchft_lighthouse`` (beside this Python; ``--min_replicas 1``) on a free loopback
port, then one ``torchrun --standalone --nproc-per-node 1`` of ``train_torchft.py`` per replica
group (``REPLICA_GROUP_ID``, ``TORCHFT_LIGHTHOUSE`` set), and waits for them: 0 when every group
finished, else the first failing group's status. The lighthouse goes when they are done.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "train_torchft.py"


def free_port() -> int:
    """A loopback port nobody holds now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def group_argv(log_dir: Path, replica: int) -> list[str]:
    """One replica group: torchrun restarting its single rank without limit."""
    return [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"),
        *("--nproc-per-node", "1", "--max-restarts", "100000"),
        *("--log-dir", str(log_dir / f"replica-{replica}"), "--redirects", "3"),
        str(PROGRAM),
    ]


def main(argv: list[str]) -> int:
    """Run the lighthouse and the replica groups; the groups' status."""
    log_dir, replicas = Path(argv[0]), int(argv[1]) if len(argv) > 1 else 2
    port = free_port()
    lighthouse = subprocess.Popen([
        str(Path(sys.executable).parent / "torchft_lighthouse"), "--min_replicas", "1",
        "--bind", f"127.0.0.1:{port}", "--join_timeout_ms", "1000", "--quorum_tick_ms", "100",
    ])
    try:
        env = {**os.environ, "TORCHFT_LIGHTHOUSE": f"http://127.0.0.1:{port}"}
        groups = [
            subprocess.Popen(group_argv(log_dir, replica), env=env | {"REPLICA_GROUP_ID": str(replica)})
            for replica in range(replicas)
        ]
        codes = [group.wait() for group in groups]
    finally:
        lighthouse.terminate()
        lighthouse.wait()
    return next((code for code in codes if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
