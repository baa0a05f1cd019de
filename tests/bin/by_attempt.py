"""Behave by attempt: by_attempt.py PIDDIR A=exit:N A=sleep ...; attempts not named exit 0.

``sleep`` writes PIDDIR/rank-R.pid first, then sleeps (at most 300 s).
"""

import os
import sys
import time

directory, specs = sys.argv[1], dict(arg.split("=", 1) for arg in sys.argv[2:])
action = specs.get(os.environ["TORCHELASTIC_RESTART_COUNT"], "exit:0")
if action == "sleep":
    path = os.path.join(directory, f"rank-{os.environ['RANK']}.pid")
    with open(path + ".tmp", "w") as out:
        out.write(f"{os.getpid()}\n")
    os.replace(path + ".tmp", path)
    time.sleep(300)
sys.exit(int(action.split(":")[1]))
