"""Finish the work, then die in teardown as a C++ runtime does: crash_on_the_way_out.py done|peer|peer-segv.

Attempt 0: ``done``: rank 1 says it finished (``elastic.heartbeat(done=True)``), prints the C++
runtime's ``terminate called without an active exception`` and aborts (SIGABRT), while rank 0
exits 0 a moment later. ``peer``: rank 0 exits 0 at once (it never says done), rank 1 aborts
the same way a second later; ``peer-segv``: it segfaults instead (SIGSEGV, nothing printed but
the interpreter's fault handler). Later attempts exit 0.
"""

import os
import signal
import sys
import time

import elastic

mode, rank = sys.argv[1], int(os.environ["RANK"])
if os.environ["TORCHELASTIC_RESTART_COUNT"] != "0":
    sys.exit(0)
if rank == 0:
    time.sleep(0.5 if mode == "done" else 0.0)
    sys.exit(0)
if mode == "done":
    elastic.heartbeat(step=100, done=True)
else:
    time.sleep(1.0)
if mode == "peer-segv":
    os.kill(os.getpid(), signal.SIGSEGV)
print("terminate called without an active exception", file=sys.stderr, flush=True)
os.abort()
