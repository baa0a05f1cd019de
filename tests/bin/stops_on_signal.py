"""Train STEPS steps the way a hand-written loop with a SIGTERM handler does: save and exit 0 when told.

Each step sleeps PAUSE seconds and prints ``step N``; rank 0 checkpoints every 10
steps (elastic.worker's JSON checkpoint). A SIGTERM handler (``signal.signal``)
sets a flag: at the next step every rank stops, rank 0 saves that step, and the
rank exits 0, as frameworks do on a preemption. A fresh attempt starts after the
checkpoint the launcher hands it. Each rank writes the step it started from to
OUTDIR/attempt-A-rank-R, and its pid to OUTDIR/ready-A-R once its handler is in.

--done: after its last step the rank says it finished (elastic.heartbeat(done=True)),
writes OUTDIR/done-A-R and waits (at most 60 s) for a SIGTERM, which it then obeys.
--at-exit: after its last step the rank writes OUTDIR/exiting-A-R from an at-exit
handler and waits there (at most 60 s) for a SIGTERM, which it then obeys.

Usage: stops_on_signal.py CKPTDIR OUTDIR STEPS PAUSE [--done | --at-exit]
"""

import atexit
import os
import signal
import sys
import time
from pathlib import Path

import elastic
from elastic.worker import resume_point, save_json_checkpoint

checkpoints, out, steps, pause = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
mode = sys.argv[5] if len(sys.argv) > 5 else ""
attempt, rank = os.environ["ELASTIC_ATTEMPT"], int(os.environ["RANK"])
told = False


def stop(signum: int, frame: object) -> None:
    global told
    told = True


def obey_when_told(name: str) -> None:
    (out / f"{name}-{attempt}-{rank}").touch()
    deadline = time.monotonic() + 60
    while not told and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"stopped by a signal {name}", flush=True)
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
(out / f"ready-{attempt}-{rank}").write_text(str(os.getpid()))
start = resume_point()
first = 0 if start is None else start.step + 1
(out / f"attempt-{attempt}-rank-{rank}").write_text(f"{first}\n")
for step in range(first, steps):
    if told:
        if rank == 0:
            save_json_checkpoint(checkpoints, step - 1, {"step": step - 1})
        print(f"stopping at step {step} on SIGTERM", flush=True)
        sys.exit(0)
    time.sleep(pause)
    print(f"step {step}", flush=True)
    if rank == 0 and step % 10 == 9:
        save_json_checkpoint(checkpoints, step, {"step": step})
if rank == 1 and mode == "--done":
    elastic.heartbeat(step=steps - 1, done=True)
    obey_when_told("done")
if rank == 1 and mode == "--at-exit":
    atexit.register(obey_when_told, "exiting")
