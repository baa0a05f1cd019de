"""``python -m elastic``."""

import sys

from elastic.cli.entry import main

sys.exit(main())
