"""What training scripts import (standard library only): the heartbeat beacon
(:mod:`elastic.worker.heartbeat`), the checkpoint helper
(:mod:`elastic.worker.checkpoint`, whose names are re-exported here), the
preemption notice (:mod:`elastic.worker.preemption`: ``preemption_requested()``,
re-exported here) and the error file (:mod:`elastic.worker.errorfile`);
:mod:`elastic.worker.jax` joins JAX's distributed runtime from the launcher's
variables (importing JAX only when called). :mod:`elastic.worker.bootstrap` is
the folder elastic puts first on each rank's ``PYTHONPATH``, whose
``sitecustomize`` makes a bare ``jax.distributed.initialize()`` join elastic's
world; scripts never import it.

``from elastic.worker import atomic_checkpoint`` loads the checkpoint helper on
first use, so a script that only beats its heartbeat does not pay for it.
"""

from __future__ import annotations

__all__ = [
    "CHECKPOINT_DIR_VAR",
    "COMMIT_MARKER",
    "JSON_STATE_NAME",
    "PREEMPTION_FILE_VAR",
    "RESUME_FROM_VAR",
    "RESUME_STEP_VAR",
    "ResumePoint",
    "atomic_checkpoint",
    "checkpoint_dir",
    "preemption_notice",
    "preemption_requested",
    "resume_point",
    "save_json_checkpoint",
    "step_dir_name",
]

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from elastic.worker.checkpoint import CHECKPOINT_DIR_VAR as CHECKPOINT_DIR_VAR
    from elastic.worker.checkpoint import COMMIT_MARKER as COMMIT_MARKER
    from elastic.worker.checkpoint import JSON_STATE_NAME as JSON_STATE_NAME
    from elastic.worker.checkpoint import RESUME_FROM_VAR as RESUME_FROM_VAR
    from elastic.worker.checkpoint import RESUME_STEP_VAR as RESUME_STEP_VAR
    from elastic.worker.checkpoint import ResumePoint as ResumePoint
    from elastic.worker.checkpoint import atomic_checkpoint as atomic_checkpoint
    from elastic.worker.checkpoint import checkpoint_dir as checkpoint_dir
    from elastic.worker.checkpoint import resume_point as resume_point
    from elastic.worker.checkpoint import save_json_checkpoint as save_json_checkpoint
    from elastic.worker.checkpoint import step_dir_name as step_dir_name
    from elastic.worker.preemption import PREEMPTION_FILE_VAR as PREEMPTION_FILE_VAR
    from elastic.worker.preemption import preemption_notice as preemption_notice
    from elastic.worker.preemption import preemption_requested as preemption_requested

_PREEMPTION = frozenset({"PREEMPTION_FILE_VAR", "preemption_notice", "preemption_requested"})


def __getattr__(name: str) -> object:
    if name in _PREEMPTION:
        from elastic.worker import preemption

        return getattr(preemption, name)
    if name in __all__:
        from elastic.worker import checkpoint

        return getattr(checkpoint, name)
    raise AttributeError(f"module 'elastic.worker' has no attribute {name!r}")
