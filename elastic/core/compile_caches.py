"""Compilation caches kept across attempts and nodes: the variables that point JAX's, torch
inductor's and Triton's caches into ``--cache-dir``, never replacing one the user set."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["CacheDirs", "cache_dirs", "cache_env", "folders_to_make"]

# JAX reads every option from JAX_<NAME> when it is imported (jax/_src/config.py).
JAX_CACHE_DIR = "JAX_COMPILATION_CACHE_DIR"
# JAX caches only what took at least 1 s to compile (its default): a restart would compile
# every smaller program again, and at scale a step's many small programs add up. 0: all of them.
JAX_MIN_COMPILE_TIME = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
# -1: no minimum size, and JAX does not raise it for the file system it finds.
JAX_MIN_ENTRY_SIZE = "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"
# torch 2.x: inductor's FX graph cache and AOT autograd cache live here (both on by default
# since torch 2.5; their switches TORCHINDUCTOR_FX_GRAPH_CACHE and TORCHINDUCTOR_AUTOGRAD_CACHE
# force them even over a script's own torch._inductor.config, so they are left alone).
INDUCTOR_CACHE_DIR = "TORCHINDUCTOR_CACHE_DIR"
# Triton's compiled kernels; inductor puts them under its own cache dir unless this is set.
TRITON_CACHE_DIR = "TRITON_CACHE_DIR"
# On CPU, inductor builds a precompiled header under $TMPDIR/torchinductor_$USER whatever
# TORCHINDUCTOR_CACHE_DIR says, and its path enters every C++ kernel's cache key: on a node with
# a cold /tmp each cached graph rebuilds the header and its kernels (measured on torch 2.13:
# 31-46 s to the first step of a cached DDP model on a loaded 2-core machine, 2.7 s without it).
# Off, a kernel's key names nothing node-local; a first compile builds without the header.
INDUCTOR_CPP_PRECOMPILE_HEADERS = "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"


@dataclass(frozen=True)
class CacheDirs:
    """Where each framework's cache goes under one ``--cache-dir`` (absolute)."""

    root: str

    @property
    def jax(self) -> str:
        return f"{self.root}/jax"

    @property
    def inductor(self) -> str:
        return f"{self.root}/torchinductor"

    @property
    def triton(self) -> str:
        return f"{self.root}/triton"


def cache_dirs(root: str | None) -> CacheDirs | None:
    """The cache folders of ``--cache-dir`` (``None``: ``--cache-dir none``)."""
    return None if root is None else CacheDirs(root.rstrip("/") or "/")


def cache_env(base_env: Mapping[str, str], dirs: CacheDirs | None) -> dict[str, str]:
    """The cache variables to add to a rank's environment: those ``base_env`` does not set.

    A variable the user set is kept as it is, and so is what follows from it: with the
    user's own ``TORCHINDUCTOR_CACHE_DIR`` and no ``TRITON_CACHE_DIR``, Triton's kernels
    stay under the user's inductor folder, as inductor puts them.
    """
    if dirs is None:
        return {}
    wanted = {
        JAX_CACHE_DIR: dirs.jax,
        JAX_MIN_COMPILE_TIME: "0",
        JAX_MIN_ENTRY_SIZE: "-1",
        INDUCTOR_CACHE_DIR: dirs.inductor,
        TRITON_CACHE_DIR: dirs.triton,
        INDUCTOR_CPP_PRECOMPILE_HEADERS: "0",
    }
    if INDUCTOR_CACHE_DIR in base_env:  # the user's own inductor cache: as inductor would keep it
        del wanted[TRITON_CACHE_DIR], wanted[INDUCTOR_CPP_PRECOMPILE_HEADERS]
    return {name: value for name, value in wanted.items() if name not in base_env}


def folders_to_make(env: Mapping[str, str], dirs: CacheDirs | None) -> tuple[str, ...]:
    """The folders of ``dirs`` that ``env`` points a framework at: created private before a rank starts."""
    if dirs is None:
        return ()
    ours = {JAX_CACHE_DIR: dirs.jax, INDUCTOR_CACHE_DIR: dirs.inductor, TRITON_CACHE_DIR: dirs.triton}
    return tuple(path for name, path in ours.items() if env.get(name) == path)
