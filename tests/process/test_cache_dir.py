"""--cache-dir as a rank sees it: the compile cache variables, their folders, `none`, a bad path."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from harness import Launcher, launcher_env, script

CACHE_VARIABLES = ("JAX_COMPILATION_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def _env(directory: Path) -> dict[str, str]:
    env: dict[str, str] = json.loads((directory / "attempt-0-rank-0.json").read_text())
    return env


def test_by_default_the_caches_live_in_the_run_directory_made_private(launcher: Launcher, tmp_path: Path) -> None:
    """No flag: each framework's folder under run_dir/cache, made 0700 before the rank starts; JAX caches everything."""
    envs = tmp_path / "envs"
    envs.mkdir()
    run = launcher.run(command=script("dump_env.py", envs))
    assert 0 == run.returncode, run.explain()
    env, cache = _env(envs), launcher.run_dir / "cache"
    assert [str(cache / d) for d in ("jax", "torchinductor", "triton")] == [env[v] for v in CACHE_VARIABLES]
    assert ("0", "-1", "0") == (env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"],
                                env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"],
                                env["TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"])
    for folder in (cache, cache / "jax", cache / "torchinductor", cache / "triton"):
        assert 0o700 == stat.S_IMODE(folder.stat().st_mode), folder


def test_cache_dir_none_leaves_the_frameworks_defaults(launcher: Launcher, tmp_path: Path) -> None:
    """--cache-dir none: no cache variable is set and no folder made; one the user set still passes through."""
    envs = tmp_path / "envs"
    envs.mkdir()
    run = launcher.run("--cache-dir", "none", command=script("dump_env.py", envs),
                       env=launcher_env(TRITON_CACHE_DIR="/mine"))
    assert 0 == run.returncode, run.explain()
    env = _env(envs)
    assert {"TRITON_CACHE_DIR": "/mine"} == {v: env[v] for v in CACHE_VARIABLES if v in env}
    assert "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in env
    assert not (launcher.run_dir / "cache").exists()


def test_a_cache_dir_that_is_a_file_is_refused_before_launch(launcher: Launcher, tmp_path: Path) -> None:
    """A one-line usage error naming the flag; nothing runs."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    run = launcher.run("--cache-dir", blocker / "cache", command=script("exit_with.py", 0))
    assert 2 == run.returncode
    assert f"elastic: error: --cache-dir: {blocker} is not a directory; give a directory or 'none'\n" == run.stderr
    assert not launcher.run_dir.exists()
