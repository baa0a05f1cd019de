"""``python -m elastic``."""

import sys

from elastic.cli.main import main

sys.exit(main())
