"""A package whose ``__main__`` is the prewarm probe (``python -m prewarm_pkg``): what its import saw.

``python -m`` imports the package before it runs ``__main__``, with ``sys.argv[0]`` ``-m``.
"""

import os
import sys

ARGV_AT_IMPORT = list(sys.argv)
RANK_AT_IMPORT = os.environ.get("RANK")
