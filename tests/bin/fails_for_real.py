"""Fail for real, as CASE says, on the attempts listed (default: every attempt); other attempts exit 0.

Usage: fails_for_real.py CASE [ATTEMPT ...]

CASE: missing-module (import a module that does not exist), syntax (compile bad source),
usage (argparse given an option it does not know: exit 2), missing-file (open a config that
is not there), full-disk (write to /dev/full: ENOSPC), port-in-use (bind a port already bound).
Each error is the library's own, raised and printed by Python as any script's would be.
"""

import os
import socket
import sys

case, attempts = sys.argv[1], [int(a) for a in sys.argv[2:]]
if attempts and int(os.environ["TORCHELASTIC_RESTART_COUNT"]) not in attempts:
    sys.exit(0)
if case == "missing-module":
    import flash_attn_does_not_exist  # noqa: F401
elif case == "syntax":
    exec(compile("def f(:\n    pass\n", "model.py", "exec"))
elif case == "usage":
    import argparse

    parser = argparse.ArgumentParser(prog="train.py")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.parse_args(["--nope"])
elif case == "missing-file":
    open("configs/does-not-exist.yml").read()
elif case == "full-disk":
    with open("/dev/full", "w") as out:
        out.write("checkpoint bytes")
elif case == "port-in-use":
    first = socket.socket()
    first.bind(("127.0.0.1", 0))
    first.listen()
    second = socket.socket()
    second.bind(("127.0.0.1", first.getsockname()[1]))
else:
    sys.exit(f"unknown case {case!r}")
