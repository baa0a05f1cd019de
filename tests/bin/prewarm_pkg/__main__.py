"""``python -m prewarm_pkg DIR ...``: the prewarm probe (tests/bin/prewarm_probe.py) run as this package's main."""

import os

with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "prewarm_probe.py")) as probe:
    exec(compile(probe.read(), probe.name, "exec"))
