"""How long each running rank of a node has shown no sign of life, read when the driver asks.

The ``--exit-timeout`` check (:mod:`elastic.core.controller.exit_hangs`) calls a rank still
running after a peer's exit 0 exit-hung only when it has also been silent that
long. A sign of life is what the node's watches already read: the rank's output
reaching its log, a change of its heartbeat file, or a write anywhere in the
checkpoint directory (a save, an upload staged there). Each is the file's
modification time, read on this node; a rank that showed none counts from its
start. One look costs a stat of each rank's two files and one bounded scan of
the checkpoint directory.
"""

from __future__ import annotations

from collections.abc import Sequence

from elastic.core.messages import RankSilence
from elastic.node.watchers.watcher import signature
from elastic.node.watchers.steps import latest_write
from elastic.node.supervisor import RunningWorker
from elastic.worker.checkpoint import CHECKPOINT_DIR_VAR
from elastic.worker.heartbeat import HEARTBEAT_FILE_VAR

__all__ = ["rank_silences"]


def rank_silences(workers: Sequence[RunningWorker], *, now: float, wall: float) -> list[RankSilence]:
    """Each worker's silence: seconds since its latest sign of life, and which sign.

    ``now``: the monotonic clock the workers' starts were read on; ``wall``: the
    clock files are stamped in (this node's ``time.time()``).
    """
    written: dict[str, float | None] = {}  # a checkpoint directory's latest write, scanned once
    silences = []
    for worker in workers:
        spec = worker.spec
        signs = [("start", now - worker.started_at)]
        for sign, path, heartbeat_file in (
            ("output", spec.log_path, False),
            ("heartbeat", spec.env.get(HEARTBEAT_FILE_VAR, ""), True),
        ):
            seen = signature(path, heartbeat_file=heartbeat_file) if path else None
            if seen is not None:
                signs.append((sign, wall - seen[1]))
        directory = spec.env.get(CHECKPOINT_DIR_VAR, "")
        if directory:
            if directory not in written:
                written[directory] = latest_write(directory)
            latest = written[directory]
            if latest is not None:
                signs.append(("checkpoint write", wall - latest))
        sign, silent_s = min(signs, key=lambda s: s[1])
        silences.append(RankSilence(spec.rank, max(0.0, silent_s), sign))
    return silences
