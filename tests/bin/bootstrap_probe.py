"""Print one JSON line of what a rank's interpreter set up before this script ran: which
``sitecustomize`` module it imported, whether elastic's JAX watch is in ``sys.meta_path``, whether
the bootstrap folder is still on ``sys.path``, and whether JAX or the bootstrap's JAX part is loaded."""

import json
import os
import sys

site = sys.modules.get("sitecustomize")
print("probe " + json.dumps({
    "sitecustomize": getattr(site, "__file__", None),
    "user_marker": os.environ.get("USER_SITECUSTOMIZE_RAN"),
    "watch": [type(finder).__name__ for finder in sys.meta_path if type(finder).__name__ == "_JaxWatch"],
    "path": sys.path,
    "pythonpath": os.environ.get("PYTHONPATH"),
    "jax_loaded": "jax" in sys.modules or "_elastic_bootstrap_jax_cluster" in sys.modules,
}), flush=True)
