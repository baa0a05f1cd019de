"""Write to OUT every ancestor of this rank and whether it ignores SIGCHLD, then SIGKILL myself.

Usage: report_agent_sigchld.py OUT

OUT holds a JSON list, nearest ancestor first, of {"pid", "cmdline",
"ignores_sigchld"} read from /proc, so a test can check the condition it
meant to create in the process that supervises ranks (the driver for the
local backend, the node agent actor for Ray).
"""

import json
import os
import signal
import sys
import time


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def describe(pid: int) -> dict[str, object]:
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        words = cmdline.read().decode(errors="replace").split("\0")
    ignored = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigIgn:"):
                ignored = int(line.split()[1], 16)
    return {
        "pid": pid,
        "cmdline": " ".join(words).strip(),
        "ignores_sigchld": bool(ignored >> (signal.SIGCHLD - 1) & 1),
    }


ancestors = []
pid = os.getppid()
while pid > 1:
    try:
        ancestors.append(describe(pid))
        pid = parent_of(pid)
    except OSError:
        break
with open(sys.argv[1] + ".tmp", "w") as out:
    json.dump(ancestors, out)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
os.kill(os.getpid(), signal.SIGKILL)
time.sleep(5)
sys.exit(1)  # the signal did not kill us: not what the test wanted
