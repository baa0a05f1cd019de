"""What a node reads of a rank it is about to kill as hung at exit, for the core to judge
whether it had finished.

Whether it said it was done, how long it has printed and beaten nothing, the last
write in the checkpoint directory, and the exception that ended its script, if one did
(:func:`elastic.core.evidence.ending_error`: its interpreter's record, its error file, its
output's final traceback; :func:`hung_rank`), then its stack's frame from the dump (:func:`with_frame`).
The judgement is :func:`elastic.core.rank_ends.judge_finished`; this module only
reads files. What a node reads of a rank that exited 0 is :mod:`elastic.node.probes.stop_signs`.
"""

from __future__ import annotations

from dataclasses import replace

from elastic.core.launch.spec import WorkerSpec
from elastic.core.evidence import ending_error
from elastic.core.rank_ends import HungRank
from elastic.core.training.hang_blame import at_work
from elastic.core.training.stack_frames import HangFrame
from elastic.node.logs.tail import read_log_tail
from elastic.node.probes.stop_signs import account
from elastic.node.watchers.watcher import signature
from elastic.node.watchers.steps import latest_write
from elastic.worker.checkpoint import CHECKPOINT_DIR_VAR
from elastic.worker.errorfile import read_error
from elastic.worker.heartbeat import HEARTBEAT_FILE_VAR, declared_done

__all__ = ["hung_rank", "with_frame"]


def hung_rank(
    spec: WorkerSpec, *, running_s: float, wall: float, written: dict[str, float | None], pid: int | None = None
) -> HungRank:
    """What says whether this rank, about to be killed as hung at exit, had finished.

    ``running_s``: seconds since it started; ``pid``: its process; ``wall``: this node's ``time.time()``, the
    clock its files are stamped in; ``written``: each checkpoint directory's latest write,
    filled as directories are scanned (one scan for the ranks of a node).
    """
    heartbeat = spec.env.get(HEARTBEAT_FILE_VAR, "")
    silent_s = running_s
    for path, heartbeat_file in ((spec.log_path, False), (heartbeat, True)):
        seen = signature(path, heartbeat_file=heartbeat_file) if path else None
        if seen is not None:
            silent_s = min(silent_s, wall - seen[1])
    checkpoint_s = None
    directory = spec.env.get(CHECKPOINT_DIR_VAR, "")
    if directory:
        if directory not in written:
            written[directory] = latest_write(directory)
        latest = written[directory]
        checkpoint_s = None if latest is None else max(0.0, wall - latest)
    error_file = spec.env.get("TORCHELASTIC_ERROR_FILE")
    own = account(spec, pid)
    ending = ending_error(
        read_log_tail(spec.log_path), uncaught=None if own is None else own.uncaught,
        recorded=read_error(error_file)[0] if error_file else None,
    )
    error = None if ending is None else ending.line
    return HungRank(
        spec.rank,
        declared_done=bool(heartbeat) and declared_done(heartbeat),
        silent_s=max(0.0, silent_s),
        checkpoint_s=checkpoint_s,
        error=error,
    )


def with_frame(seen: HungRank, frame: HangFrame | None) -> HungRank:
    """``seen`` with what its stack dump showed: whether its interpreter was exiting, and where."""
    if frame is None:
        return seen
    return replace(seen, at_exit=frame.at_exit, frame=frame.describe(), at_work=at_work(frame))
