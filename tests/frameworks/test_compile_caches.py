"""Compilation caches kept across attempts: JAX's persistent cache and torch inductor's, with the real frameworks."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from harness import Finished, Launcher, launcher_env, script, skip_unless_installed

# Loaded machines: importing a framework and compiling take seconds per attempt.
RUN_TIMEOUT_S = 240.0
JAX_CACHE_LINE = re.compile(r"cache: hits=(\d+) misses=(\d+) dir=(\S+)")
TORCH_CACHE_LINE = re.compile(r"cache: fxgraph_hits=(\d+) fxgraph_misses=(\d+) dir=(\S+)")


def _cache_line(run: Finished, attempt: int, pattern: re.Pattern[str]) -> tuple[int, int, Path]:
    found = pattern.search(run.rank_log(attempt, 0))
    assert found is not None, run.rank_log(attempt, 0)[-2000:]
    return int(found[1]), int(found[2]), Path(found[3])


def _restarted_once(run: Finished) -> None:
    assert 0 == run.returncode, run.explain()
    assert 2 == len(run.report()["attempts"])


def test_a_restarted_jax_job_hits_the_persistent_cache_in_the_run_directory(launcher: Launcher) -> None:
    """Attempt 0 compiles and fills run_dir/cache/jax (0700); attempt 1 compiles nothing: every program is a hit."""
    skip_unless_installed("jax")
    run = launcher.run("--max-restarts", 1, command=script("jax_cached_step.py"),
                       env=launcher_env(JAX_PLATFORMS="cpu"), timeout_s=RUN_TIMEOUT_S)
    _restarted_once(run)
    cache = launcher.run_dir / "cache" / "jax"
    hits, misses, directory = _cache_line(run, 0, JAX_CACHE_LINE)
    assert (0, cache) == (hits, directory)
    assert misses >= 1
    assert misses == len(list(cache.glob("*-cache")))  # every program, however quick to compile
    assert (misses, 0, cache) == _cache_line(run, 1, JAX_CACHE_LINE)
    assert 0o700 == stat.S_IMODE((launcher.run_dir / "cache").stat().st_mode)
    assert 0o700 == stat.S_IMODE(cache.stat().st_mode)


def test_the_users_own_jax_cache_dir_is_kept(launcher: Launcher, tmp_path: Path) -> None:
    """JAX_COMPILATION_CACHE_DIR set by the user: the ranks use it, the restart hits it, the run's stays unused."""
    skip_unless_installed("jax")
    mine = tmp_path / "my-jax-cache"
    run = launcher.run("--max-restarts", 1, command=script("jax_cached_step.py"),
                       env=launcher_env(JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=str(mine)),
                       timeout_s=RUN_TIMEOUT_S)
    _restarted_once(run)
    hits, misses, directory = _cache_line(run, 1, JAX_CACHE_LINE)
    assert (0, mine) == (misses, directory)
    assert hits >= 1
    assert hits == len(list(mine.glob("*-cache")))
    assert not (launcher.run_dir / "cache" / "jax").exists()


@pytest.mark.timeout(2 * RUN_TIMEOUT_S)  # an inductor compile with g++ on a loaded 2-core machine: up to minutes
def test_a_torch_compile_job_on_a_cold_tmp_hits_inductors_cache_in_the_cache_dir(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Each attempt has a fresh TMPDIR (a replacement node): attempt 1 still loads the compiled graph
    from --cache-dir, where attempt 0 put it, and compiles nothing."""
    skip_unless_installed("torch")
    shared, tmps = tmp_path / "shared-cache", tmp_path / "tmps"
    tmps.mkdir()
    run = launcher.run("--max-restarts", 1, "--cache-dir", shared, command=script("torch_cached_step.py", tmps),
                       env=launcher_env(TORCHINDUCTOR_COMPILE_THREADS="1"), timeout_s=RUN_TIMEOUT_S)
    _restarted_once(run)
    inductor = shared / "torchinductor"
    hits, misses, directory = _cache_line(run, 0, TORCH_CACHE_LINE)
    assert (0, inductor) == (hits, directory)
    assert misses >= 1
    assert (misses, 0, inductor) == _cache_line(run, 1, TORCH_CACHE_LINE)
    assert list((inductor / "fxgraph").rglob("*"))
    assert not (launcher.run_dir / "cache").exists()
