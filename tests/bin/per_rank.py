"""Become the command given for this rank: per_rank.py 'CMD for rank 0' 'CMD for rank 1' ...

Each CMD is a shell-quoted string; one whose first word ends in .py is a script of
tests/bin/ and runs with this Python. exec keeps the rank's pid.
"""

import os
import shlex
import sys

argv = shlex.split(sys.argv[1 + int(os.environ["RANK"])])
if argv[0].endswith(".py"):
    argv = [sys.executable, os.path.join(os.path.dirname(__file__), argv[0]), *argv[1:]]
os.execvp(argv[0], argv)
