"""elastic: a fault-tolerant elastic launcher for distributed training.

Kept import-light on purpose: worker-side helpers and the guardian import this
package, so nothing here pulls in the driver, structlog or Ray.
"""

__all__ = ["__version__"]

__version__ = "0.1.0.dev0"
