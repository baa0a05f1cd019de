"""Which Ray cluster ``--backend ray`` joins, decided without importing Ray."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["embeds_ray", "local_cluster_file"]


def local_cluster_file() -> Path:
    """Where ``ray start`` records the address of the cluster it started on this machine."""
    return Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"


def embeds_ray(address: str | None, env: Mapping[str, str]) -> bool:
    """True when no cluster is named or running here, so elastic starts its own Ray."""
    return not (address or env.get("RAY_ADDRESS") or local_cluster_file().exists())
