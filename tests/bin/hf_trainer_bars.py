"""Draw the bars the Hugging Face Trainer draws, with no call into elastic: a training bar
(total: the steps) and, during an evaluation, a second bar (total: the evaluation's batches).

Usage: hf_trainer_bars.py STEPS EVAL_AT EVAL_BATCHES

Both go to stderr as tqdm writes them: the training bar redrawn with ``\\r`` and no
newline; at step EVAL_AT an evaluation bar one line below (``\\n``, redraws with ``\\r``,
the cursor back up with ``ESC[A``) over EVAL_BATCHES batches, 2 ms each, cleared when
done, then the evaluation's metrics on a line of their own, as the Trainer logs them.
Training steps take 0.05 s; the script exits 0 after STEPS steps.
"""

import sys
import time

steps, eval_at, eval_batches = (int(arg) for arg in sys.argv[1:4])
STEP_S = 0.05
BATCH_S = 0.002
UP = "\x1b[A"


def bar(n: int, total: int) -> str:
    done = 100 * n // total
    return f"{done:3d}%|{'█' * (done // 10):<10}| {n}/{total} [00:01<00:04, 20.00it/s]"


def draw(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def evaluate() -> None:
    for batch in range(eval_batches + 1):
        draw(f"\n\r{bar(batch, eval_batches)}{UP}")
        time.sleep(BATCH_S)
    draw(f"\n\r{' ' * 60}\r{UP}")
    draw(f"\n{{'eval_loss': 2.1, 'eval_runtime': {eval_batches * BATCH_S:.2f}, 'epoch': 0.05}}\n")


draw(f"\r{bar(0, steps)}")
for step in range(1, steps + 1):
    time.sleep(STEP_S)
    draw(f"\r{bar(step, steps)}")
    if step == eval_at:
        evaluate()
draw("\n")
