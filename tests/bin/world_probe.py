"""Record the world, then behave by attempt: world_probe.py PIDDIR OUTDIR A=exit:N A=sleep ...

Every rank first writes "WORLD_SIZE ELASTIC_WORLD_CHANGED" to OUTDIR/attempt-A-rank-R;
``sleep`` then writes PIDDIR/rank-R.pid and sleeps (at most 300 s); attempts not named exit 0.
"""

import os
import sys
import time

directory, out, specs = sys.argv[1], sys.argv[2], dict(arg.split("=", 1) for arg in sys.argv[3:])
attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
with open(os.path.join(out, f"attempt-{attempt}-rank-{rank}"), "w") as record:
    record.write(f"{os.environ['WORLD_SIZE']} {os.environ['ELASTIC_WORLD_CHANGED']}\n")
action = specs.get(attempt, "exit:0")
if action == "sleep":
    path = os.path.join(directory, f"rank-{rank}.pid")
    with open(path + ".tmp", "w") as pid_file:
        pid_file.write(f"{os.getpid()}\n")
    os.replace(path + ".tmp", path)
    time.sleep(300)
sys.exit(int(action.split(":")[1]))
