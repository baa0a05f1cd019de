"""Which GPUs a node shows: the pure parsing of visibility lists, and detection."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from elastic.core.launch.plan import GpuVendor

__all__ = ["detect_gpus", "visible_gpu_ids"]

_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
_KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")


def visible_gpu_ids(visible: str | None, count: int) -> tuple[str, ...]:
    """The device ids a process may use: the visibility list if set, else ``0..count-1``.

    ``CUDA_VISIBLE_DEVICES=""`` hides every device; entries may be indices or UUIDs.
    """
    if visible is None:
        return tuple(str(i) for i in range(count))
    return tuple(entry.strip() for entry in visible.split(",") if entry.strip())


def _count_rocm_gpus(nodes: Path) -> int:
    count = 0
    for properties in nodes.glob("*/properties"):
        try:
            fields = dict(
                line.split(maxsplit=1) for line in properties.read_text().splitlines() if " " in line
            )
        except OSError:
            continue
        if int(fields.get("simd_count", "0")) > 0:
            count += 1
    return count


def detect_gpus(env: Mapping[str, str]) -> tuple[GpuVendor, tuple[str, ...]]:
    """This machine's GPU vendor and the ids visible to it under ``env``."""
    if _NVIDIA_GPUS.is_dir():
        count = sum(1 for _ in _NVIDIA_GPUS.iterdir())
        return GpuVendor.CUDA, visible_gpu_ids(env.get("CUDA_VISIBLE_DEVICES"), count)
    if _KFD_NODES.is_dir():
        count = _count_rocm_gpus(_KFD_NODES)
        if count:
            visible = env.get("HIP_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES"))
            return GpuVendor.ROCM, visible_gpu_ids(visible, count)
    return GpuVendor.NONE, ()
