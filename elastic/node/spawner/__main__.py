"""``python -m elastic.node.spawner``: run the spawner process (:func:`elastic.node.spawner.process.main`)."""

import sys

from elastic.node.spawner.process import main

sys.exit(main(sys.argv[1:]))
