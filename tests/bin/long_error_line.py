"""Fail the way MaxText does on a misspelt config key: one line of 21,259 characters, exit 1.

The line names the key first, then every valid key, and ends in '...'key_01633'.'
"""

import sys

KEYS = ", ".join(repr(f"key_{n:05d}") for n in range(1, 1634))
print("loading the config", flush=True)
print(f"ValueError: 'num_stpes' not in {KEYS}.", file=sys.stderr, flush=True)
sys.exit(1)
