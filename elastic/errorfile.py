"""Compatibility: ``from elastic.errorfile import record`` keeps working.

The error file helper lives in :mod:`elastic.worker.errorfile` with the other
worker-side helpers; this thin module re-exports its public names for the
training scripts that import it by its first name.
"""

from __future__ import annotations

from elastic.worker.errorfile import read_error_message, record, write_error_file

__all__ = ["read_error_message", "record", "write_error_file"]
