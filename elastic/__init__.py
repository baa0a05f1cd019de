"""elastic: a fault-tolerant elastic launcher for distributed training.

Kept import-light on purpose: worker-side helpers and the spawner import this
package, so nothing here pulls in the driver, structlog or Ray, nor even
``typing``. ``elastic.heartbeat(step=...)`` loads :mod:`elastic.worker.heartbeat` on
first use.
"""

from __future__ import annotations

__all__ = ["__version__", "heartbeat"]

__version__ = "0.1.0.dev0"

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from elastic.worker.heartbeat import heartbeat as heartbeat


def __getattr__(name: str) -> object:
    if name == "heartbeat":
        import importlib

        # The submodule is callable: ``elastic.heartbeat(step=...)`` calls
        # ``elastic.worker.heartbeat.heartbeat`` (``elastic.heartbeat`` is an
        # alias of that module), whichever of the two got bound here.
        return importlib.import_module("elastic.heartbeat")
    raise AttributeError(f"module 'elastic' has no attribute {name!r}")
