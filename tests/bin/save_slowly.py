"""Ignore SIGTERM (as a JAX rank's preemption service does), then save a checkpoint slowly.

Writes CHECKPOINT_DIR/ckpt-R.bin (R: the rank) in CHUNKS chunks of 1 MiB, PAUSE seconds
apart, through one open file: a temporary name, fsynced, then renamed. READY is created
one PAUSE after the first chunk, while the file is open and before the next chunk, so a
peer that fails on READY does so mid-save, with the directory last written PAUSE ago.
Prints ``saved`` once the checkpoint is whole, then sleeps (at most 300 s). The file's
bytes are its chunks' numbers, so a test can tell a whole checkpoint from a torn one.
With ``after``, READY is created only once the save is whole: a peer that fails on it
does so just after a save ended.

Usage: save_slowly.py CHECKPOINT_DIR READY CHUNKS PAUSE [after]
"""

import os
import signal
import sys
import time

directory, ready, chunks, pause_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
ready_after = sys.argv[5:] == ["after"]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
final = os.path.join(directory, f"ckpt-{os.environ['RANK']}.bin")
partial = final + ".tmp"
with open(partial, "wb") as out:
    for chunk in range(chunks):
        out.write(bytes([chunk]) * (1 << 20))
        out.flush()
        time.sleep(pause_s)
        if chunk == 0 and not ready_after:
            open(ready, "w").close()
            time.sleep(pause_s)
    os.fsync(out.fileno())
os.replace(partial, final)
print("saved", flush=True)
if ready_after:
    open(ready, "w").close()
time.sleep(300)
