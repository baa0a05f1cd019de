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
    assert [] == run.events("compile_cache_replaced")  # the rank's note says elastic's cache
    assert (launcher.run_dir / "attempt-1" / "rank-0.jax-cache.json").exists()


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
    assert [] == run.events("compile_cache_replaced")  # the user's own choice, made before the launch


@pytest.mark.parametrize(
    ("option", "setting"),
    [("--own-cache", "jax_compilation_cache_dir (jax.config.update or compilation_cache.set_cache_dir)"),
     ("--own-cache-env", "JAX_COMPILATION_CACHE_DIR in its own environment")],
    ids=["jax-config", "own-environment"],
)
def test_a_program_that_replaces_elastics_jax_cache_is_reported_once(
    launcher: Launcher, tmp_path: Path, option: str, setting: str
) -> None:
    """The program sets its own cache folder after elastic handed it one: both attempts compile into
    the program's, elastic's stays empty, and the run says so once (journal, report, summary), naming
    the setting, the folder and how to use elastic's."""
    skip_unless_installed("jax")
    theirs = tmp_path / "their-jax-cache"
    run = launcher.run("--max-restarts", 1,
                       command=script("jax_cached_step.py", option, theirs),
                       env=launcher_env(JAX_PLATFORMS="cpu"), timeout_s=RUN_TIMEOUT_S)  # fmt: skip
    _restarted_once(run)
    assert theirs == _cache_line(run, 1, JAX_CACHE_LINE)[2]
    ours = launcher.run_dir / "cache" / "jax"
    assert [] == list(ours.iterdir())
    [record] = run.events("compile_cache_replaced")
    assert (0, 0, "jax", str(theirs), str(ours)) == (
        record["attempt"], record["rank"], record["framework"], record["cache_dir"], record["handed"])
    reason = record["reason"]
    assert f"the program set {setting} to {theirs}, replacing elastic's {ours}" in reason
    assert "leave it unset and JAX uses elastic's cache (--cache-dir)" in reason
    assert reason == run.report()["compile_cache_replaced"]["reason"]
    summary = [line for line in run.stderr.splitlines() if line.startswith("  compilation cache of rank 0:")]
    assert [f"  compilation cache of rank 0: {reason}"] == summary


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
