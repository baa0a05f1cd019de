"""Write what this script sees, as JSON, to DIR/attempt-A-rank-R.json: what ``--prewarm`` must keep.

Usage: prewarm_probe.py DIR [--fail-rank R] [--sleep] [--sleep-on-attempt A] [--raise] [EXTRA...]
(or ``python -m prewarm_probe DIR ...``, or ``python -m prewarm_pkg DIR ...``, which runs this probe).
--fail-rank: on attempt 0, rank R exits 3 once every rank of the attempt wrote its record
(up to 60 s). --sleep: then sleep until killed (--sleep-on-attempt: on attempt A only).
--raise: rank 0 then raises ValueError (exit 1); the other ranks wait to be stopped, so that no
  peer's exit cuts rank 0's traceback short.
"""

import json
import os
import signal
import sys
import time

import prewarm_early
import prewarm_late

directory = sys.argv[1]
main = sys.modules["__main__"]
attempt = os.environ["ELASTIC_ATTEMPT"]
record = {
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "name": __name__,
    "main_is_this_module": main.__dict__ is globals(),
    "path0": sys.path[0],
    "path": sys.path,
    "file": __file__,
    "spec": None if __spec__ is None else [
        __spec__.name, __spec__.origin, type(__spec__.loader).__name__, __spec__.parent, __spec__.cached,
        __spec__.submodule_search_locations, __spec__.has_location,
    ],
    "package": __package__,
    "cached": __cached__,
    "loader": [type(__loader__).__name__, __loader__.name, __loader__.path],
    "main_dunders": [k for k in vars(main) if k.startswith("__")],  # in their order
    "executable": sys.executable,
    "flags": repr(sys.flags),
    "cwd": os.getcwd(),
    "environ": dict(os.environ),
    "late_module_env_at_import": prewarm_late.ENV_AT_IMPORT,
    # python -m prewarm_pkg: sys.argv and RANK when the package was imported (before its __main__).
    "package_at_import": [
        getattr(sys.modules.get("prewarm_pkg"), "ARGV_AT_IMPORT", None),
        getattr(sys.modules.get("prewarm_pkg"), "RANK_AT_IMPORT", None),
    ],
    "early_module_rank_at_import": prewarm_early.RANK_AT_IMPORT,
    "early_module_same_pid": prewarm_early.PID_AT_IMPORT == os.getpid(),
    "fds": {fd: os.readlink(f"/proc/self/fd/{fd}").replace(f"attempt-{attempt}", "attempt-A") for fd in (0, 1, 2)},
    "signals": {
        s.name: repr(signal.getsignal(s))
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD)
    },
    "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "pid": os.getpid(),
}
rank = os.environ["RANK"]
path = os.path.join(directory, f"attempt-{attempt}-rank-{rank}.json")
with open(path + ".tmp", "w") as out:
    json.dump(record, out)
os.replace(path + ".tmp", path)
print(f"probe: wrote {path}", flush=True)

if "--fail-rank" in sys.argv and attempt == "0" and rank == sys.argv[sys.argv.index("--fail-rank") + 1]:
    world = int(os.environ["WORLD_SIZE"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if sum(os.path.exists(os.path.join(directory, f"attempt-0-rank-{r}.json")) for r in range(world)) == world:
            break
        time.sleep(0.02)
    sys.exit(3)
sleep_on = sys.argv[sys.argv.index("--sleep-on-attempt") + 1] if "--sleep-on-attempt" in sys.argv else None
if "--sleep" in sys.argv or sleep_on == attempt:
    while True:
        time.sleep(1)
if "--raise" in sys.argv:
    if rank == "0":
        raise ValueError("probe raised as asked")
    while True:
        time.sleep(1)
