"""The end of a run: a rank that crashed on its way out, its work done, is finished, not failed. Pure.

The most common end-of-run failure of multi-node jobs: every rank trained to the end, and one
dies in interpreter teardown (a C++ ``terminate called without an active exception``, a
segfault in a destructor, gloo's teardown). A rank that said it finished
(``elastic.heartbeat(done=True)``) and then crashed or was killed is finished. With
``--exit-hang succeed`` a peer's exit 0 is evidence enough: a crash within ``--exit-timeout``
of it is finished too. Otherwise such a crash is the ``teardown`` signature
(:mod:`elastic.core.diagnosis.signatures`) and is restarted.
"""

from __future__ import annotations

from elastic.core.failures import CRASH_SIGNALS, WorkerExit, decode_returncode
from elastic.core.labels import signal_name

__all__ = ["finished_in_teardown", "teardown_fields"]


def finished_in_teardown(
    exit: WorkerExit, *, peer_exit_0_at: float | None, exit_timeout_s: float | None, exit_hang_succeeds: bool
) -> str | None:
    """Why a failed exit is a rank that had finished, in words; ``None`` when it is a failure.

    ``peer_exit_0_at``: when the attempt's first rank exited 0, if one did (its ``--exit-timeout``
    timer); ``exit_hang_succeeds``: ``--exit-hang succeed``.
    """
    if not exit.declared_done and (not exit_hang_succeeds or peer_exit_0_at is None):
        return None  # the common case, at every exit of a drain: nothing to look at
    if exit.succeeded or exit.returncode is None or exit.launch_error or exit.node_lost or exit.hung:
        return None
    code, signum = decode_returncode(exit.returncode)
    how = f"exit code {code}" if signum is None else signal_name(signum)
    if exit.declared_done:
        return f"it said it was done (elastic.heartbeat(done=True)), then ended by {how} on its way out"
    if not exit_hang_succeeds or peer_exit_0_at is None or exit_timeout_s is None or signum not in CRASH_SIGNALS:
        return None
    after_s = exit.observed_at - peer_exit_0_at
    if not 0.0 <= after_s <= exit_timeout_s:
        return None
    return f"it crashed ({how}) {after_s:.1f} s after a peer's exit 0 (--exit-hang succeed)"


def teardown_fields(exit: WorkerExit) -> dict[str, object]:
    """How a finished rank ended, as its ``worker_exited`` record holds it (its real status)."""
    code, signum = decode_returncode(exit.returncode) if exit.returncode is not None else (None, None)
    return {"exit_code": code, "signal": None if signum is None else signal_name(signum)}
