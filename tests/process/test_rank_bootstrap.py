"""The rank bootstrap (``--rank-bootstrap``, elastic/worker/bootstrap/) in real interpreters: it
stands in front of whatever ``sitecustomize`` the rank's Python has and changes nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import Finished, Launcher, launcher_env, script

from elastic.worker.bootstrap import BOOTSTRAP_DIR

DEBIAN_PYTHON = Path("/usr/bin/python3")  # Debian's own interpreter ships a sitecustomize


def _pythonpath(*first: Path) -> str:
    """``first``, then this process's PYTHONPATH (the launcher must run this checkout's elastic)."""
    return os.pathsep.join([*map(str, first), *filter(None, [os.environ.get("PYTHONPATH")])])


def _probe(run: Finished, rank: int = 0) -> dict[str, Any]:
    lines = [line for line in run.rank_log(0, rank).splitlines() if line.startswith("probe ")]
    assert 1 == len(lines), run.rank_log(0, rank)[-3000:]
    probe: dict[str, Any] = json.loads(lines[0][len("probe "):])
    return probe


def _user_site(tmp_path: Path, body: str) -> Path:
    folder = tmp_path / "user-site"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(body)
    return folder


def test_the_users_own_sitecustomize_still_runs_and_the_bootstrap_leaves_no_trace_on_sys_path(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A sitecustomize on the user's PYTHONPATH runs as it would have; the bootstrap's folder is off
    sys.path, stays first on PYTHONPATH for the rank's children, and nothing of JAX is loaded."""
    user = _user_site(tmp_path, "import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = 'yes'\n")
    env = launcher_env(PYTHONPATH=_pythonpath(user))
    run = launcher.run("--nproc-per-node", 1, command=script("bootstrap_probe.py"), env=env)
    assert 0 == run.returncode, run.explain()
    probe = _probe(run)
    assert (str(user / "sitecustomize.py"), "yes", ["_JaxWatch"]) == (
        probe["sitecustomize"], probe["user_marker"], probe["watch"])
    assert BOOTSTRAP_DIR not in probe["path"] and str(user) in probe["path"]
    assert probe["pythonpath"].startswith(BOOTSTRAP_DIR + os.pathsep + str(user))
    assert probe["jax_loaded"] is False


@pytest.mark.skipif(not list(Path("/usr/lib").glob("python3*/sitecustomize.py")) or not DEBIAN_PYTHON.exists(),
                    reason="needs Debian's python3, which ships a sitecustomize")
def test_debians_sitecustomize_is_the_one_imported_after_the_bootstrap(launcher: Launcher) -> None:
    """A rank run by another interpreter (Debian's, where elastic is not installed) gets the
    bootstrap and still imports its own sitecustomize."""
    run = launcher.run("--nproc-per-node", 1, command=[DEBIAN_PYTHON, *script("bootstrap_probe.py")[1:]])
    assert 0 == run.returncode, run.explain()
    probe = _probe(run)
    assert probe["sitecustomize"].startswith("/usr/lib/python3") and ["_JaxWatch"] == probe["watch"]


def test_a_failing_user_sitecustomize_fails_as_it_would_without_elastic(launcher: Launcher, tmp_path: Path) -> None:
    """Python's own message for an error in sitecustomize, and the rank goes on, as without the bootstrap."""
    user = _user_site(tmp_path, "raise RuntimeError('broken site')\n")
    command = script("bootstrap_probe.py")
    env = launcher_env(PYTHONPATH=_pythonpath(user))
    without = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    run = launcher.run("--nproc-per-node", 1, command=command, env=env)
    assert 0 == run.returncode == without.returncode, run.explain()
    expected = "Error in sitecustomize; set PYTHONVERBOSE for traceback:\nRuntimeError: broken site\n"
    assert expected in without.stderr and expected in run.rank_log(0, 0)


def test_off_leaves_pythonpath_alone(launcher: Launcher, tmp_path: Path) -> None:
    """--rank-bootstrap off: no bootstrap folder, no watch; the user's PYTHONPATH as it was."""
    env = launcher_env(PYTHONPATH=_pythonpath(tmp_path))
    run = launcher.run("--nproc-per-node", 1, "--rank-bootstrap", "off", command=script("bootstrap_probe.py"), env=env)
    assert 0 == run.returncode, run.explain()
    probe = _probe(run)
    assert (env["PYTHONPATH"], []) == (probe["pythonpath"], probe["watch"])


def _fake_jax(tmp_path: Path, clusters: str, distributed: str) -> Path:
    """A package named jax whose internals are not JAX 0.10's: what another JAX version may look like."""
    root = tmp_path / "fake"
    (root / "jax" / "_src" / "clusters").mkdir(parents=True)
    (root / "jax" / "__init__.py").write_text("__version__ = '0.0.1'\n")
    (root / "jax" / "_src" / "__init__.py").write_text("")
    (root / "jax" / "_src" / "clusters" / "__init__.py").write_text(clusters)
    (root / "jax" / "_src" / "distributed.py").write_text("from jax._src import clusters\n" + distributed)
    return root


RANK_ENV = {"RANK": "0", "WORLD_SIZE": "2", "ELASTIC_COORDINATOR_ADDRESS": "127.0.0.1:1"}


@pytest.mark.parametrize(
    ("clusters", "distributed"),
    [
        ("class ClusterEnv:\n    pass\n", "class State:\n    def initialize(self, address):\n        pass\n"),
        ("", ""),
    ],
    ids=["no-cluster-types", "nothing"],
)
def test_a_jax_with_other_internals_gets_one_warning_line_and_nothing_else(
    tmp_path: Path, clusters: str, distributed: str
) -> None:
    """No ClusterEnv._cluster_types, no State.initialize(coordinator_address, ...): the import works,
    one line says the bare initialize() will not join, nothing is changed."""
    fake = _fake_jax(tmp_path, clusters, distributed)
    env = {**launcher_env(**RANK_ENV), "PYTHONPATH": os.pathsep.join([BOOTSTRAP_DIR, str(fake)])}
    code = "import jax._src.distributed; print('imported')"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert (0, "imported\n") == (done.returncode, done.stdout), done.stderr
    lines = done.stderr.splitlines()
    assert 1 == len(lines) and lines[0].startswith("elastic: JAX 0.0.1 has "), done.stderr
    assert "elastic.worker.jax.initialize()" in lines[0]


# JAX's protocol in miniature (jax/_src/clusters/cluster.py, jax/_src/distributed.py of JAX 0.10-0.12):
# subclasses register themselves in definition order, and initialize() asks the first one present.
MINI_CLUSTERS = """\
class ClusterEnv:
    _cluster_types = []

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._cluster_types.append(cls)


class SlurmCluster(ClusterEnv):
    @classmethod
    def is_env_present(cls):
        return True
"""
MINI_DISTRIBUTED = """\
class State:
    def initialize(self, coordinator_address=None, num_processes=None, process_id=None, local_device_ids=None):
        found = next(env for env in clusters.ClusterEnv._cluster_types if env.is_env_present())
        return (coordinator_address, num_processes or found.get_process_count(),
                found.get_process_id() if process_id is None else process_id, found.__name__)
"""
INTERPRETERS = sorted({sys.executable, *map(str, Path("/root/.pyenv/versions").glob("3.1[0-9]*/bin/python3"))})


@pytest.mark.parametrize("python", INTERPRETERS)
def test_every_python_from_3_10_gets_elastics_cluster_first_and_the_attempts_coordinator(
    tmp_path: Path, python: str
) -> None:
    """With JAX's registration protocol (in miniature: only CPython 3.11 and 3.12 have the real JAX
    here), each interpreter puts elastic's cluster first, gives a bare initialize() elastic's world
    and replaces a fixed port, and still runs the user's own sitecustomize."""
    fake = _fake_jax(tmp_path, MINI_CLUSTERS, MINI_DISTRIBUTED)
    user = _user_site(tmp_path, "import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = 'yes'\n")
    env = {**launcher_env(**{**RANK_ENV, "RANK": "1", "WORLD_SIZE": "3"}),
           "PYTHONPATH": os.pathsep.join([BOOTSTRAP_DIR, str(user), str(fake)])}
    code = ("import json, os\nfrom jax._src import clusters, distributed\n"
            "print(json.dumps([os.environ.get('USER_SITECUSTOMIZE_RAN'),"
            " [c.__name__ for c in clusters.ClusterEnv._cluster_types],"
            " distributed.State().initialize(), distributed.State().initialize('127.0.0.1:1234', 3, 1)]))")
    done = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert 0 == done.returncode, done.stderr
    joined = ["127.0.0.1:1", 3, 1, "ElasticCluster"]
    assert ["yes", ["ElasticCluster", "SlurmCluster"], joined, joined] == json.loads(done.stdout)
    assert "using this attempt's coordinator 127.0.0.1:1" in done.stderr


# JAX's compilation cache in miniature (jax/_src/compilation_cache.py of JAX 0.10-0.12): its config
# and monitoring modules, and the event its first compile records once a process.
MINI_CACHE = """\
import types
from jax._src import monitoring
config = types.SimpleNamespace(compilation_cache_dir=types.SimpleNamespace(value=None))
"""
MINI_MONITORING = """\
listeners = []
def register_event_listener(callback):
    listeners.append(callback)
def record_event(event, **kwargs):
    for listen in listeners:
        listen(event, **kwargs)
"""


@pytest.mark.parametrize("python", INTERPRETERS)
def test_every_python_from_3_10_notes_where_jax_caches_at_its_first_compile(tmp_path: Path, python: str) -> None:
    """The rank bootstrap listens to JAX's monitoring events: at the first compile it writes the
    cache folder JAX has then (here one the program set itself) beside the heartbeat file, once,
    private, and a later event changes nothing."""
    fake = _fake_jax(tmp_path, MINI_CLUSTERS, MINI_DISTRIBUTED)
    (fake / "jax" / "_src" / "monitoring.py").write_text(MINI_MONITORING)
    (fake / "jax" / "_src" / "compilation_cache.py").write_text(MINI_CACHE)
    attempt = tmp_path / "attempt-0"
    attempt.mkdir()
    env = {**launcher_env(**RANK_ENV, ELASTIC_HEARTBEAT_FILE=str(attempt / "rank-0.heartbeat"),
                          JAX_COMPILATION_CACHE_DIR="/elastics"),
           "PYTHONPATH": os.pathsep.join([BOOTSTRAP_DIR, str(fake)])}
    code = ("from jax._src import compilation_cache as cc, monitoring\n"
            "monitoring.record_event('/jax/compilation_cache/compile_requests_use_cache')\n"
            "cc.config.compilation_cache_dir.value = '/theirs'\n"
            "monitoring.record_event('/jax/compilation_cache/tasks_using_cache')\n"
            "cc.config.compilation_cache_dir.value = '/later'\n"
            "monitoring.record_event('/jax/compilation_cache/tasks_using_cache')\n")
    done = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert (0, "") == (done.returncode, done.stderr)
    note = attempt / "rank-0.jax-cache.json"
    expected = {"jax_compilation_cache_dir": "/theirs", "enabled": True, "variable": "/elastics", "maxtext": False}
    assert expected == json.loads(note.read_text())
    assert 0o600 == note.stat().st_mode & 0o777
    assert ["rank-0.jax-cache.json"] == [path.name for path in attempt.iterdir()]


# A rank that installs a stop handler, is signalled twice, forks a child (a data loader worker) and
# starts a Python process of its own (a helper), each of which catches a signal too; then the fake
# JAX's sync point answers true twice. Prints what getsignal returns and the owner mark it leaves.
SIGNAL_PROBE = """
import json, os, signal, subprocess, sys, time
from jax.experimental import multihost_utils
def save(number, frame):
    print("handler", number, flush=True)
signal.signal(signal.SIGTERM, save)
got = signal.getsignal(signal.SIGTERM) is save
for _ in range(2):
    os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.05)
child = os.fork()
if child == 0:
    os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.05); os._exit(0)
os.waitpid(child, 0)
code = "import os, signal, time; signal.signal(signal.SIGUSR1, print); os.kill(os.getpid(), signal.SIGUSR1); time.sleep(0.05)"
subprocess.run([sys.executable, "-c", code], check=True)
print(json.dumps([got, multihost_utils.reached_preemption_sync_point(7), multihost_utils.reached_preemption_sync_point(8),
                  os.environ.get("_ELASTIC_SIGNALS_PID") == str(os.getpid())]))
"""
FAKE_MULTIHOST = "def reached_preemption_sync_point(step_id):\n    return True\n"


@pytest.mark.parametrize("python", INTERPRETERS)
def test_every_python_from_3_10_writes_the_ranks_own_stop_signals_once(tmp_path: Path, python: str) -> None:
    """The rank's own SIGTERM handler (installed, then run) and JAX's sync point are each written
    once, with the handler still the rank's (getsignal) and still run; a forked child and a
    started process write nothing."""
    fake = _fake_jax(tmp_path, MINI_CLUSTERS, MINI_DISTRIBUTED)
    (fake / "jax" / "experimental").mkdir()
    (fake / "jax" / "experimental" / "__init__.py").write_text("")
    (fake / "jax" / "experimental" / "multihost_utils.py").write_text(FAKE_MULTIHOST)
    signals = tmp_path / "rank-0.signals"
    env = {**launcher_env(**RANK_ENV), "ELASTIC_SIGNALS_FILE": str(signals),
           "PYTHONPATH": os.pathsep.join([BOOTSTRAP_DIR, str(fake)])}
    done = subprocess.run([python, "-c", SIGNAL_PROBE], env=env, capture_output=True, text=True, timeout=60,
                          check=False)

    assert 0 == done.returncode, done.stderr
    assert 3 == done.stdout.count("handler 15"), done.stdout  # twice in the rank, once in its child
    assert [True, True, True, True] == json.loads(done.stdout.splitlines()[-1])
    entries = [json.loads(line) for line in signals.read_text().splitlines()]
    assert [(15, "SIGTERM", None, None), (None, "SIGTERM", False, None), (None, None, None, 7)] == [
        (e.get("installed"), e.get("name"), e.get("at_exit"), e.get("preemption_sync")) for e in entries
    ], entries
    assert entries[0]["handler"] == entries[1]["handler"] == "save (<string>:4)"
