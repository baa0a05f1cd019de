"""A module to prewarm (``--prewarm prewarm_early``): records the environment its import saw.

Imported cold (by the script, after launch) it sees the rank's variables; imported by
a warm interpreter before launch it sees none of them (RANK absent).
"""

import os

RANK_AT_IMPORT = os.environ.get("RANK")
PID_AT_IMPORT = os.getpid()
