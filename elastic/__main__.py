"""``python -m elastic``."""

import sys

from elastic.run.held_notices import EARLY_NOTICE_SIGNAL, hold_notices

hold_notices(EARLY_NOTICE_SIGNAL)  # a notice while the launcher imports itself is kept, not fatal

from elastic.cli.entry import main  # noqa: E402  (after the hold: this import takes a second or more)

sys.exit(main())
