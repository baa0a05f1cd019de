"""Running ``--preflight`` on this node: one command, bounded by its timeout, its output's tail kept.

The command runs in a session of its own with no shell, its output (stdout and stderr
together) going to an unnamed temporary file, so a command that prints without end costs
disk, not memory, and only the tail is read back. When it exits, or when its time is up,
its whole process group is SIGKILLed before it is reaped (so nothing it left in the
background outlives it, and the group id cannot have been reused). What the result means
is decided in :mod:`elastic.core.diagnosis.preflight`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time

from elastic.core.diagnosis.preflight import OUTPUT_LINES, NodeCommand, NodeCommandResult
from elastic.node.logs.tail import read_tail

__all__ = ["run_node_command"]

_POLL_S = 0.02  # the first wait between looks at the process, doubled up to _POLL_MAX_S
_POLL_MAX_S = 0.2


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited, leaving it a zombie (its group id stays taken)."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    return info is not None and info.si_pid == pid


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_node_command(command: NodeCommand, timeout_s: float) -> NodeCommandResult:
    """Run ``command`` here, for at most ``timeout_s``; how it ended and its last lines."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as output:
        try:
            process = subprocess.Popen(
                command.argv, env=dict(command.env), cwd=command.cwd, stdin=subprocess.DEVNULL,
                stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
            )
        except OSError as error:  # not found, not executable, a missing folder
            reason = error.strerror or str(error)
            named = error.filename if isinstance(error.filename, str) else command.argv[0]
            return NodeCommandResult(command.node, error=f"{reason}: {named}",
                                     duration_s=time.monotonic() - started)
        deadline_at = started + timeout_s
        pause_s = _POLL_S
        timed_out = False
        while not _exited(process.pid):
            left_s = deadline_at - time.monotonic()
            if left_s <= 0:
                timed_out = True
                break
            time.sleep(min(pause_s, left_s))
            pause_s = min(pause_s * 2, _POLL_MAX_S)
        _kill_group(process.pid)  # the command itself on a timeout; what it left behind either way
        returncode = process.wait()
        duration_s = time.monotonic() - started
        lines = read_tail(output, OUTPUT_LINES)  # the one tail rule: a long last line kept, cut
    if timed_out:
        return NodeCommandResult(command.node, timed_out=True, output=lines, duration_s=duration_s)
    if returncode < 0:
        return NodeCommandResult(command.node, signal=-returncode, output=lines, duration_s=duration_s)
    return NodeCommandResult(command.node, exit_code=returncode, output=lines, duration_s=duration_s)
