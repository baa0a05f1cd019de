"""Print training steps the way frameworks do, with no call into elastic.

Usage: prints_steps.py FORMAT BEHAVIOUR [ARG]

FORMAT: ``plain`` (``step 12 loss 2.3``), ``hf`` (a tqdm bar redrawn with ``\\r``,
as the Hugging Face Trainer draws it), ``lightning`` (Lightning's per-epoch
bar), ``custom`` (``it=12 done``, for ``--progress-pattern``), ``both`` (``step 120``
printed for step 12, and ``elastic.heartbeat(step=12)``: the heartbeat wins).

BEHAVIOUR:
- ``steps N``: print N steps, 0.05 s apart, and exit 0.
- ``stalls``: in attempt 0 rank 1 prints 20 steps, then only other lines (NCCL
  warnings, an evaluation bar counting from 1, a retry loop) from inside
  ``stuck_in_allreduce()``; every other rank steps on (for at most 60 s). In
  other attempts every rank prints 20 steps and exits 0.
- ``saves DIR SECONDS``: print 20 steps, then write a checkpoint into DIR for
  SECONDS (a chunk every 0.2 s, in ``save_checkpoint()``), then 20 more steps; exit 0.
- ``pauses SECONDS``: print 20 steps, then nothing for SECONDS (an evaluation
  pass that prints nothing), then 20 more steps; exit 0.
"""

import os
import sys
import time

fmt, behaviour, args = sys.argv[1], sys.argv[2], sys.argv[3:]
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
TOTAL = 1000
STEP_S = 0.05


def show(step: int) -> None:
    if fmt == "hf":
        done = int(100 * step / TOTAL)
        sys.stderr.write(f"\r{done:3d}%|{'█' * (done // 10):<10}| {step}/{TOTAL} [00:01<03:49,  3.84it/s]")
        sys.stderr.flush()
    elif fmt == "lightning":  # step 10 is batch 10 of epoch 0 (10/10), step 11 batch 1 of epoch 1
        epoch, within = divmod(step - 1, 10)
        within += 1
        bar = f"Epoch {epoch}:  {within * 10}%|{'█' * within:<10}| {within}/10 [00:01<00:01,  3.20it/s, v_num=0]"
        sys.stdout.write(bar + "\n")
        sys.stdout.flush()
    elif fmt == "both":
        import elastic

        print(f"step {step * 10} loss 2.31", flush=True)
        elastic.heartbeat(step=step)
    elif fmt == "custom":
        print(f"it={step} done", flush=True)
    else:
        print(f"step {step} loss 2.31", flush=True)


def train(first: int, count: int) -> int:
    for step in range(first, first + count):
        show(step)
        time.sleep(STEP_S)
    return first + count


def stuck_in_allreduce() -> None:
    """Output goes on, steps do not."""
    line = 0
    while True:
        line += 1
        print(f"NCCL WARN Call to connect returned Connection refused, retrying ({line})", flush=True)
        print(f"Evaluating: {line % 5 + 1}/5", flush=True)
        time.sleep(0.1)


def save_checkpoint(directory: str, seconds: float) -> None:
    os.makedirs(directory, exist_ok=True)
    started = time.monotonic()
    with open(os.path.join(directory, f"rank-{rank}.bin"), "wb") as out:
        while time.monotonic() - started < seconds:
            out.write(b"\0" * 4096)
            out.flush()
            time.sleep(0.2)


if behaviour == "steps":
    train(1, int(args[0]))
elif behaviour == "stalls":
    if attempt == 0 and rank == 1:
        train(1, 20)
        stuck_in_allreduce()
    started = time.monotonic()
    step = 1
    while attempt == 0 and time.monotonic() - started < 60.0:
        step = train(step, 1)
    if attempt != 0:
        train(1, 20)
elif behaviour == "saves":
    step = train(1, 20)
    save_checkpoint(args[0], float(args[1]))
    train(step, 20)
elif behaviour == "pauses":
    step = train(1, 20)
    time.sleep(float(args[0]))
    train(step, 20)
