"""Compilation caches kept across attempts and nodes: the variables that point JAX's, torch
inductor's and Triton's caches into ``--cache-dir``, never replacing one the user set."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CacheDirs", "cache_dirs", "cache_env", "folders_to_make", "handed_jax_cache", "jax_cache_replaced"]

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


def handed_jax_cache(base_env: Mapping[str, str], dirs: CacheDirs | None) -> str | None:
    """The JAX cache elastic hands the ranks (``JAX_COMPILATION_CACHE_DIR``), or None: the user's own, or none."""
    return cache_env(base_env, dirs).get(JAX_CACHE_DIR)


def jax_cache_replaced(note: Mapping[str, Any], handed: str) -> str | None:
    """Why a rank's JAX did not cache in ``handed``, elastic's folder, in words; None when it did.

    ``note`` is what the rank bootstrap saw at the rank's first compile
    (``elastic/worker/bootstrap/jax_cache_note.py``): JAX's cache folder then, whether
    the cache was on, the process's own ``JAX_COMPILATION_CACHE_DIR`` then, and
    whether MaxText was loaded. The words name the setting and how to use elastic's.
    """
    used = note.get("jax_compilation_cache_dir")
    variable = note.get("variable")
    use_ours = "leave it unset and JAX uses elastic's cache (--cache-dir)"
    if note.get("maxtext"):
        use_ours = ("pass jax_cache_dir= (empty) on MaxText's command line and JAX uses elastic's cache "
                    "(--cache-dir)")
    if not note.get("enabled", True):
        return f"the program turned JAX's compilation cache off (jax_enable_compilation_cache); {use_ours}"
    if isinstance(used, str) and used and os.path.normpath(used) == os.path.normpath(handed):
        return None
    if variable == used and variable != handed:
        setting = "JAX_COMPILATION_CACHE_DIR in its own environment"
    elif note.get("maxtext"):
        setting = "MaxText's jax_cache_dir (default ~/jax_cache)"
    else:
        setting = "jax_compilation_cache_dir (jax.config.update or compilation_cache.set_cache_dir)"
    where = f"to {used}" if used else "to nothing (JAX caches no program)"
    return (f"the program set {setting} {where}, replacing elastic's {handed}: what it compiles is not "
            f"kept in --cache-dir; {use_ours}")

