"""Ranks that end in ways whose verdict is easy to get wrong, each the way ordinary scripts end.

Usage: ends_badly.py MODE

- ``raise-then-hang``: a gloo process group of torch; rank 0 all-reduces once, destroys the group
  and exits 0; rank 1 then raises ``OSError: [Errno 28] No space left on device`` (writing the final
  model) with a non-daemon thread left running, so its interpreter never exits. torch (2.3+) prints
  the traceback through its excepthook, every line prefixed ``[rank1]:``.
- ``raise-warn-then-hang``: no torch; rank 0 exits 0; rank 1 raises ``ValueError``, then its
  non-daemon thread prints torch's exit-time ``destroy_process_group() was not called`` warning
  and never ends.
- ``upload-at-end``: rank 1 writes a checkpoint into ``ELASTIC_CHECKPOINT_DIR``; rank 0 then exits
  0; rank 1 uploads silently for a minute in ``upload_to_bucket()`` (its own code).
- ``handler-then-train``: each rank installs a SIGUSR1 handler that dumps its progress; rank 0
  signals itself at step 2, then every rank trains to step 40 (``step N`` every 0.2 s) and exits 0.
- ``fast-then-stop``: in attempt 0, ``step N`` every 0.02 s; each rank installs a SIGUSR1 handler
  that sets a flag; rank 0 signals itself at step 300 (six seconds of steps and more), ends the
  step under way, saves for 2 s and exits 0; rank 1 trains to step 600 and exits 0. In later
  attempts every rank exits 0 at once.
- ``probe-then-killed``: in attempt 0, rank 1 logs a failed ``import apex`` probe with its
  traceback (``logging.exception``), prints its start-up (no step yet) and is SIGKILLed (as the
  OOM killer would); in later attempts every rank exits 0 at once.
- ``stuck-while-peer-waits``: a gloo process group of torch, an all-reduce each step; only rank 0
  prints its steps (the usual habit); at step 8 rank 1 gets stuck in ``stuck_in_my_code()`` (for two
  minutes), so rank 0 blocks in its next all-reduce.
- ``plain-error``: rank 1 raises ``ValueError: bad shape (3, 4) for layer 7`` after a step.
"""

import logging
import os
import signal
import sys
import threading
import time

mode = sys.argv[1]
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
DESTROY_WARNING = (
    "[W1207 03:45:36.408271257 ProcessGroupNCCL.cpp:1250] Warning: WARNING: destroy_process_group() was not "
    "called before program exit, which can leak resources. For more info, please see "
    "https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())"
)


def never_ends(warn: bool = False) -> None:
    if warn:
        time.sleep(0.3)
        print(DESTROY_WARNING, file=sys.stderr, flush=True)
    while True:
        time.sleep(1)


def upload_to_bucket() -> None:
    time.sleep(60)


def dump_progress(signum: int, frame: object) -> None:
    print(f"progress dump on signal {signum}", flush=True)


if mode == "raise-then-hang":
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(2))
    print("step 1", flush=True)
    if rank == 0:
        dist.destroy_process_group()
        sys.exit(0)
    time.sleep(0.5)
    threading.Thread(target=never_ends).start()
    raise OSError(28, "No space left on device")
elif mode == "raise-warn-then-hang":
    print("step 1", flush=True)
    if rank == 0:
        sys.exit(0)
    time.sleep(0.5)
    threading.Thread(target=never_ends, args=(True,)).start()
    raise ValueError("bad shape (3, 4) for layer 7")
elif mode == "upload-at-end":
    print("step 1", flush=True)
    if rank == 0:
        time.sleep(0.5)
        sys.exit(0)
    with open(os.path.join(os.environ["ELASTIC_CHECKPOINT_DIR"], "final.pt"), "w") as saved:
        saved.write("weights")
    upload_to_bucket()
elif mode == "handler-then-train":
    signal.signal(signal.SIGUSR1, dump_progress)
    for step in range(1, 41):
        print(f"step {step} loss 2.3", flush=True)
        if rank == 0 and step == 2:
            os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.2)
elif mode == "fast-then-stop":
    if attempt > 0:
        sys.exit(0)
    told: list[int] = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: told.append(signum))
    for step in range(1, 601):
        print(f"step {step} loss 2.3", flush=True)
        if told:
            print(f"saving at step {step} on signal {told[0]}", flush=True)
            time.sleep(2)
            sys.exit(0)
        if rank == 0 and step == 300:
            os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.02)
elif mode == "probe-then-killed":
    if attempt > 0:
        sys.exit(0)
    if rank == 1:
        try:
            import apex  # noqa: F401
        except ImportError:
            logging.exception("apex is not installed, using the PyTorch optimizer")
        print("model built: 124M parameters", flush=True)
        for shard in range(3):
            print(f"loading shard {shard}", flush=True)
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)
elif mode == "stuck-while-peer-waits":
    import torch
    import torch.distributed as dist

    def stuck_in_my_code() -> None:
        time.sleep(120)

    dist.init_process_group("gloo")
    for step in range(1, 1000):
        if rank == 1 and step == 8:
            stuck_in_my_code()
        dist.all_reduce(torch.ones(4))
        if rank == 0:
            print(f"step {step} loss 2.3", flush=True)
        time.sleep(0.3)  # steps the node's watch sees one by one: a stall needs two
elif mode == "plain-error":
    print("step 1", flush=True)
    if rank == 1:
        raise ValueError("bad shape (3, 4) for layer 7")
    time.sleep(30)
else:
    sys.exit(f"ends_badly.py: unknown mode {mode!r}")
