"""Three ranks in a "collective": one fails its own way, the other two time out waiting and abort.

Usage: collective_cascade.py silent|culprit|silent-unordered

On attempt 0 every rank calls ``elastic.heartbeat(step=...)`` every 0.1 s. Rank 1 stops:
``silent``: after step 3 it sleeps, printing nothing (hung); ``culprit``: it prints CUDA's
illegal memory access error (evo-design/evo#136) and sleeps, stuck before it could exit.
Ranks 0 and 2 go on stepping for 8 s (the launcher hears their steps; it reports a node's
steps at most every 5 s), then print NCCL's watchdog timeout as PyTorch does
(hiyouga/LlamaFactory#7396, NVIDIA/nccl#1609) and abort, rank 0 first: rank 0 waits until
rank 2 has printed its timeout (a marker file beside the error files), and rank 2 waits to be
ended by the drain.
``silent-unordered``: as ``silent``, but rank 0 aborts as soon as its 8 s are up, whether or not
rank 2 has printed its timeout yet (a real cascade's order: the drain may end rank 2 first).
Later attempts exit 0.
"""

import os
import sys
import time

import elastic

WATCHDOG = [
    "[rank{r}]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) "
    "ran for 600060 milliseconds before timing out.",
    "[rank{r}]:[E321 02:07:08.465150152 ProcessGroupNCCL.cpp:1664] [PG 1 Rank {r}] Exception (either an error or "
    "timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.",
    "terminate called after throwing an instance of 'c10::DistBackendError'",
]
ILLEGAL = [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
]

mode = sys.argv[1]
rank = int(os.environ["RANK"])
if os.environ["TORCHELASTIC_RESTART_COUNT"] != "0":
    sys.exit(0)
start = time.monotonic()
step = 0
while True:
    step += 1
    elastic.heartbeat(step=step)
    time.sleep(0.1)
    if rank == 1 and step == 3:
        if mode == "culprit":
            print("\n".join(ILLEGAL), file=sys.stderr, flush=True)
        time.sleep(300)  # hung: the drain ends it
        sys.exit(3)
    if rank != 1 and time.monotonic() - start > 8:
        break
# Rank 2's timeout is printed before rank 0 aborts (the drain then reads it), however loaded the machine.
printed = os.path.join(os.path.dirname(os.environ["TORCHELASTIC_ERROR_FILE"]), "cascade-rank-2-timed-out")
if rank == 0 and mode != "silent-unordered":
    deadline = time.monotonic() + 30
    while not os.path.exists(printed) and time.monotonic() < deadline:
        time.sleep(0.05)
print("\n".join(WATCHDOG).format(r=rank), file=sys.stderr, flush=True)
if rank == 2:
    open(printed, "w").close()
    time.sleep(30)  # the drain ends it first
os.abort()
