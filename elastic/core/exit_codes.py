"""Exit statuses of ``elastic run`` that are the launcher's own (DESIGN §10).

Everything else ``elastic run`` returns is the root cause's status: the failed
rank's exit code, or 128+N when it (or the launcher itself) died by signal N.
"""

from __future__ import annotations

import enum

__all__ = ["ExitCode"]


class ExitCode(enum.IntEnum):
    SUCCESS = 0
    USAGE_ERROR = 2  # bad flags or files; nothing was launched
    INTERNAL_ERROR = 70  # a bug in elastic itself (sysexits EX_SOFTWARE)
    RUN_HELD = 73  # another live driver holds the run (its directory's lock): nothing was done, do not requeue
    RUN_DIR_UNWRITABLE = 74  # a run directory file could not be written, e.g. a full disk (EX_IOERR)
    NODES_UNAVAILABLE = 75  # fewer nodes than --nnodes MIN came (EX_TEMPFAIL: requeue)
    CRASH_LOOP = 76  # --max-no-progress attempts in a row without a newer checkpoint: do not requeue
    LAUNCH_NOT_EXECUTABLE = 126  # the command exists but cannot be executed
    LAUNCH_NOT_FOUND = 127  # the command was not found
