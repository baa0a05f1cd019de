"""A hand-written training loop that saves a checkpoint when a preemption notice comes.

Usage: save_on_notice.py OUTDIR MODE [STEPS]

Each rank writes OUTDIR/ready-A-R (A: attempt, R: rank) once it is stepping, then
steps every 0.05 s up to STEPS (default 1200: about a minute); resumed (ELASTIC_RESUME_STEP
set), it goes on from there for at most 5 steps. MODE says how the notice reaches the loop:

- ``flag``: the loop checks ``elastic.worker.preemption_requested()`` every step
  (run with ``--preempt-signal none``, or SIGTERM would kill it first);
- ``sigterm``: a SIGTERM handler sets a flag the loop checks (and records whether
  ``preemption_requested()`` was already true when the signal came).

On the notice, rank 0 saves ``step_N`` (N: its current step) with
``elastic.worker.atomic_checkpoint``; every rank writes OUTDIR/notice-A-R (the notice
as ``preemption_notice()`` gives it, the step, and ``preemption_requested()`` at the
signal) and exits 0. Reaching STEPS, it writes OUTDIR/done-A-R (with the step it
resumed from) and exits 0.
"""

import json
import os
import signal
import sys
import time

from elastic.worker import atomic_checkpoint, checkpoint_dir, preemption_notice, preemption_requested

out, mode = sys.argv[1], sys.argv[2]
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 1200
attempt, rank = os.environ["ELASTIC_ATTEMPT"], os.environ["RANK"]
start = int(os.environ.get("ELASTIC_RESUME_STEP", "0"))
if start:
    steps = min(steps, start + 5)

signalled: list[bool] = []  # preemption_requested() when SIGTERM came
if mode == "sigterm":
    signal.signal(signal.SIGTERM, lambda *_: signalled.append(preemption_requested()))


def write(name: str, value: object) -> None:
    with open(os.path.join(out, f"{name}-{attempt}-{rank}"), "w") as file:
        json.dump(value, file)


write("ready", {"resume_step": start})
for step in range(start + 1, steps + 1):
    time.sleep(0.05)
    noticed = bool(signalled) if mode == "sigterm" else preemption_requested()
    if noticed:
        if rank == "0":
            with atomic_checkpoint(checkpoint_dir() or out, step) as tmp:
                (tmp / "state.json").write_text(json.dumps({"step": step}))
        write("notice", {"notice": preemption_notice(), "step": step, "flag_at_signal": signalled})
        sys.exit(0)
write("done", {"resume_step": start})
