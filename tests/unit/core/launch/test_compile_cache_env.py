"""The compilation cache variables of a rank: under --cache-dir, never over what the user set."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.core.launch.compile_caches import CacheDirs, cache_dirs, cache_env, handed_jax_cache, jax_cache_replaced
from elastic.worker.bootstrap.jax_cache_note import note_path
from elastic.core.launch.spec import worker_specs
from elastic.core.launch.plan import NodeSlot, plan_attempt
from elastic.core.run_layout import RunLayout

LAYOUT = RunLayout(Path("/runs/r1"))
OURS = {
    "JAX_COMPILATION_CACHE_DIR": "/shared/cache/jax",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    "TORCHINDUCTOR_CACHE_DIR": "/shared/cache/torchinductor",
    "TRITON_CACHE_DIR": "/shared/cache/triton",
    "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0",
}


def _plan(cache_dir: str | None):  # type: ignore[no-untyped-def]
    return plan_attempt(run_id="r1", attempt=1, max_restarts=3, nodes=[NodeSlot("a", "10.0.0.1", 2)],
                        master_addr=None, master_port=29500, coordinator_port=29600, cache_dir=cache_dir)


def test_every_framework_gets_its_own_folder_under_the_cache_dir() -> None:
    """JAX's persistent cache (every program, however quick to compile), inductor's and Triton's."""
    assert OURS == cache_env({"PATH": "/bin"}, cache_dirs("/shared/cache/"))


def test_cache_dir_none_sets_nothing() -> None:
    """--cache-dir none: the frameworks' own defaults."""
    assert {} == cache_env({}, cache_dirs(None))
    spec = worker_specs(_plan(None), ["python", "train.py"], {}, LAYOUT)[0]
    assert set(OURS).isdisjoint(spec.env)
    assert () == spec.private_dirs


@pytest.mark.parametrize("name", sorted(OURS))
def test_a_variable_the_user_set_is_kept(name: str) -> None:
    """Each of the variables, set by the user, reaches the rank unchanged; the others are still set."""
    spec = worker_specs(_plan("/shared/cache"), ["python", "train.py"], {name: "mine"}, LAYOUT)[0]
    assert "mine" == spec.env[name]
    others = {k: v for k, v in OURS.items() if k != name}
    if name == "TORCHINDUCTOR_CACHE_DIR":  # Triton's kernels stay under the user's inductor folder
        for follows in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"):
            del others[follows]
            assert follows not in spec.env
    assert others == {k: spec.env[k] for k in others}
    assert "mine" not in spec.private_dirs


def test_the_folders_the_ranks_use_are_made_before_they_start() -> None:
    """Every rank's spec names the cache folders it was pointed at, to be made private on its node."""
    specs = worker_specs(_plan("/shared/cache"), ["python", "train.py"], {"TRITON_CACHE_DIR": "/t"}, LAYOUT)
    dirs = CacheDirs("/shared/cache")
    assert [(dirs.jax, dirs.inductor)] * 2 == [spec.private_dirs for spec in specs]


HANDED = "/runs/r1/cache/jax"


@pytest.mark.parametrize(
    ("note", "words"),
    [
        ({"jax_compilation_cache_dir": HANDED, "enabled": True, "variable": HANDED}, None),
        ({"jax_compilation_cache_dir": HANDED + "/", "enabled": True, "variable": HANDED}, None),
        ({"jax_compilation_cache_dir": "/home/u/jax_cache", "enabled": True, "variable": HANDED},
         "the program set jax_compilation_cache_dir (jax.config.update or compilation_cache.set_cache_dir) "
         "to /home/u/jax_cache, replacing elastic's /runs/r1/cache/jax: what it compiles is not kept in "
         "--cache-dir; leave it unset and JAX uses elastic's cache (--cache-dir)"),
        ({"jax_compilation_cache_dir": "/mine", "enabled": True, "variable": "/mine"},
         "the program set JAX_COMPILATION_CACHE_DIR in its own environment to /mine, replacing"),
        ({"jax_compilation_cache_dir": "/home/u/jax_cache", "enabled": True, "variable": HANDED, "maxtext": True},
         "the program set MaxText's jax_cache_dir (default ~/jax_cache) to /home/u/jax_cache, replacing"),
        ({"jax_compilation_cache_dir": None, "enabled": True, "variable": HANDED},
         "the program set jax_compilation_cache_dir (jax.config.update or compilation_cache.set_cache_dir) "
         "to nothing (JAX caches no program), replacing"),
        ({"jax_compilation_cache_dir": HANDED, "enabled": False, "variable": HANDED, "maxtext": True},
         "the program turned JAX's compilation cache off (jax_enable_compilation_cache); pass jax_cache_dir= "
         "(empty) on MaxText's command line and JAX uses elastic's cache (--cache-dir)"),
    ],
    ids=["elastics", "elastics-with-slash", "jax-config", "own-variable", "maxtext", "none", "turned-off"],
)
def test_a_replaced_jax_cache_is_named_with_its_setting_and_the_way_back(note: dict[str, object], words: str | None) -> None:
    """What replaced elastic's JAX cache, read from a rank's note, and how to use elastic's instead."""
    said = jax_cache_replaced(note, HANDED)
    if words is None:
        assert said is None
    else:
        assert said is not None and said.startswith(words)


def test_the_handed_jax_cache_is_elastics_only_when_it_set_it() -> None:
    """None when the user set JAX_COMPILATION_CACHE_DIR or --cache-dir is none: nothing to compare with."""
    dirs = cache_dirs("/runs/r1/cache")
    assert (HANDED, None, None) == (
        handed_jax_cache({}, dirs), handed_jax_cache({"JAX_COMPILATION_CACHE_DIR": "/u"}, dirs), handed_jax_cache({}, None)
    )


def test_the_rank_writes_its_note_where_the_launcher_reads_it() -> None:
    """The bootstrap's path, from the rank's variables, is the run layout's (beside the heartbeat file)."""
    env = {"ELASTIC_HEARTBEAT_FILE": str(LAYOUT.heartbeat_file(2, 5)), "RANK": "5"}
    assert str(LAYOUT.jax_cache_note(2, 5)) == note_path(env)
    assert None is note_path({"RANK": "5"})
