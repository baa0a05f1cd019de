"""A module the probe imports itself (never prewarmed): the environment its import saw."""

import os

ENV_AT_IMPORT = dict(os.environ)
