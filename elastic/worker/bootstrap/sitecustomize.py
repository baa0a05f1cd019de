"""elastic's rank bootstrap: JAX's bare ``jax.distributed.initialize()`` joins elastic's world,
and a stop signal the rank catches itself is known to the launcher.

Python imports ``sitecustomize`` at start-up from the first folder of
``sys.path`` that has one; elastic puts this folder first on each rank's
``PYTHONPATH`` (``--rank-bootstrap on``, the default). This module then

0. writes the ``interpreter`` mark of the rank's start-up to its
   ``ELASTIC_STARTUP_FILE`` (``startup_marks.py`` beside this file has the others);
1. installs a meta-path finder that watches for seven modules only, four of JAX's,
   ``jax._src.clusters``, ``jax._src.distributed``,
   ``jax.experimental.multihost_utils`` and ``jax._src.compilation_cache``,
   torch's ``distributed_c10d`` and ``checkpoint.state_dict_loader``, Orbax's
   ``checkpoint_manager``, and completes each once it has run (``jax_cluster.py`` beside this file:
   elastic's ``ClusterEnv``, first in JAX's detection order, and the attempt's
   coordinator; ``rank_signals.py``: JAX's preemption sync point, written down
   when it is reached; ``jax_cache_note.py``: which compilation cache the
   rank's first compile uses, noted for the launcher; ``startup_marks.py``:
   the distributed initialisation, the checkpoint restore and the compilation cache's
   reads, timed for the launcher's start-up profile);
2. puts its own ``signal.signal`` in front of the interpreter's (``_signal``'s,
   which the ``signal`` module calls), so that a Python handler the rank
   installs for SIGTERM, SIGINT, SIGHUP or SIGUSR1 writes the signal to the
   rank's ``ELASTIC_SIGNALS_FILE`` before it runs (``rank_signals.py``, loaded
   only then); ``signal.getsignal`` returns the rank's own handler;
3. puts its own ``sys.excepthook`` in front of the interpreter's, so that the exception
   that ends the rank's script is written to its signals file, then reported as before;
4. in a warm interpreter whose start-up must learn nothing of an attempt (``--prewarm-memory``:
   ``prewarm.py`` with ``_ELASTIC_PREWARM_WATCH=1``), puts an ``os.environ`` in place that notes
   each name read, so that a ``sitecustomize`` further on that reads ``RANK`` starts the rank cold;
5. takes its folder off ``sys.path`` and imports the ``sitecustomize`` that
   would have been imported without it (Debian's, a virtual environment's, one
   on the user's own ``PYTHONPATH``), so that one still runs, as it would
   have, errors included.

Why this and not another way in:

- JAX finds cluster environments by the subclasses of ``ClusterEnv`` that
  exist when ``jax.distributed.initialize()`` runs, in the order they were
  defined, its own first (Slurm, Open MPI, Kubernetes...). Elastic's must be
  defined after JAX's own (it subclasses theirs) and moved to the front, so it
  has to run inside the rank at the moment JAX's clusters module is imported.
  JAX's ``jax_plugins`` packages are imported only when a backend starts,
  after ``initialize()``: too late.
- A ``.pth`` file works only in the environment it is installed in; a rank
  may run another interpreter (MaxText needs Python 3.12) where elastic is
  not installed. ``PYTHONPATH`` reaches any CPython, and a folder holding
  only these two files shadows nothing of the user's.
- Setting Slurm's or Open MPI's variables so that JAX's own detection finds
  elastic's world would make other libraries (Lightning, mpi4py) believe they
  run under Slurm or MPI.
- Wrapping the command (``python -m elastic.bootstrap ...``) changes the
  rank's ``argv`` and needs elastic in the rank's environment.

Why a hook and not the rank's output, for the stop signals: a rank's lines
are the framework's to word, and a handler the rank installs is the only place
a signal that did not kill it can be seen (the launcher cannot tell who sent a
signal it did not send; docs/failures/preemption.md: "Stopped is not finished").

Cost in a rank that never imports JAX: this file, one finder in
``sys.meta_path`` that compares each new module's name with seven strings, two
functions in ``_signal`` (called only when the rank installs a handler), and
the search for the next ``sitecustomize`` (docs/getting-started/jax-orbax.md: "Joining JAX's runtime"
has the measurement). Nothing here imports JAX or reads the rank's variables
at start-up, so a warm interpreter (``--prewarm``) that is handed its rank's
environment later behaves as a cold one. Python 3.10 and later, standard
library only; with a JAX whose internals differ, one warning line and
nothing else (``jax_cluster.py``). ``python -S``, ``-E`` and ``-I`` skip it,
as they skip every ``sitecustomize`` or ``PYTHONPATH``.
"""

import os
import sys

# No `from __future__`, no typing at run time: each import costs every rank at start-up;
# the annotations are strings, for mypy.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any
_HERE = os.path.dirname(os.path.abspath(__file__))
# The frameworks' modules, and the files beside this one and their functions that complete each once it has run.
_HOOKED = {
    "jax._src.clusters": (("jax_cluster", "on_clusters"),),
    "jax._src.distributed": (("jax_cluster", "on_distributed"), ("startup_marks", "on_jax_distributed")),
    "jax.experimental.multihost_utils": (("rank_signals", "on_multihost_utils"),),
    "jax._src.compilation_cache": (("jax_cache_note", "on_compilation_cache"),
                                   ("startup_marks", "on_compilation_cache")),
    "torch.distributed.distributed_c10d": (("startup_marks", "on_torch_c10d"),),
    "torch.distributed.checkpoint.state_dict_loader": (("startup_marks", "on_torch_dcp_loader"),),
    "orbax.checkpoint.checkpoint_manager": (("startup_marks", "on_orbax_manager"),),
}
_STARTUP_FILE_VAR = "ELASTIC_STARTUP_FILE"  # startup_marks.STARTUP_FILE_VAR
_PART_PREFIX = "_elastic_bootstrap_"  # a file beside this one is sys.modules[_PART_PREFIX + its name]
# Set (to 1) by the spawner's pool in a warm interpreter whose start-up and imports are watched
# (elastic.node.spawner.prewarm_pool.WATCH_VAR).
_WATCH_VAR = "_ELASTIC_PREWARM_WATCH"
_OWNER_VAR = "_ELASTIC_SIGNALS_PID"  # rank_signals.OWNER_VAR: set once the rank installs a handler
_owner = None  # this pid, unless the rank that started this process marked its own: then a child


def _part(name: str) -> "ModuleType":
    """A file beside this one, loaded by its path (elastic may not be importable here)."""
    loaded = sys.modules.get(_PART_PREFIX + name)
    if loaded is None:
        import importlib.util

        spec = importlib.util.spec_from_file_location(_PART_PREFIX + name, os.path.join(_HERE, name + ".py"))
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[_PART_PREFIX + name] = loaded
        spec.loader.exec_module(loaded)
        if name == "rank_signals":
            setattr(loaded, "owner", _owner)  # the rank's own pid, or None in a child
    return loaded


class _JaxWatch:
    """A meta-path finder that answers for nothing: for the modules of :data:`_HOOKED` it asks the
    finders after it and hands their spec back with a loader that completes the module once it has run."""

    def find_spec(self, name: str, path: "Any" = None, target: "Any" = None) -> "Any":
        hooked = _HOOKED.get(name)
        if hooked is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                try:
                    for part, function in hooked:
                        completion = getattr(_part(part), function)
                        spec.loader = _part("jax_cluster").CompletingLoader(spec.loader, completion)
                except Exception as error:  # never break the rank's `import jax`
                    sys.stderr.write(f"elastic: the rank bootstrap left JAX as it is ({type(error).__name__}: {error})\n")
            if spec is not None:
                return spec
        return None


def _install() -> None:
    if not any(type(finder).__name__ == "_JaxWatch" for finder in sys.meta_path):
        sys.meta_path.insert(0, _JaxWatch())


def _unwrapped(handler: "Any") -> "Any":
    return getattr(handler, "_elastic_handler", handler)


def _watch_signals() -> None:
    """Put a ``signal.signal`` in front of ``_signal``'s that wraps the rank's stop handlers."""
    global _owner
    import _signal  # type: ignore[import-not-found]  # signal.py's C half: no stub

    set_handler, get_handler = _signal.signal, _signal.getsignal
    if getattr(set_handler, "_elastic", False):
        return
    pid = str(os.getpid())
    _owner = os.getpid() if os.environ.get(_OWNER_VAR, pid) == pid else None
    stops = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGUSR1)

    def signal(signalnum: "Any", handler: "Any") -> "Any":
        if _owner is not None and callable(handler) and signalnum in stops:
            try:
                handler = _part("rank_signals").watched(signalnum, handler)
            except Exception as error:  # never in the way of the rank's handler
                sys.stderr.write(f"elastic: the rank bootstrap left signal {signalnum}'s handler as it is "
                                 f"({type(error).__name__}: {error})\n")
        return _unwrapped(set_handler(signalnum, handler))

    def getsignal(signalnum: "Any") -> "Any":
        return _unwrapped(get_handler(signalnum))

    signal.__doc__, getsignal.__doc__ = set_handler.__doc__, get_handler.__doc__
    signal._elastic = True  # type: ignore[attr-defined]
    _signal.signal, _signal.getsignal = signal, getsignal


def _watch_excepthook() -> None:
    """Put a ``sys.excepthook`` in front of the one there: the exception the interpreter could not
    hand to any ``except`` (the one that ends the script) is written to the rank's signals file,
    with this process's pid (a Python process the rank starts writes its own, which the node
    tells apart by the pid), then the hook before it runs (Python's report; a framework that sets
    its own later, such as torch's ``[rankN]:`` prefixer, calls this one in turn). Nothing is
    added to the rank's environment: a warm rank sees what a cold one does."""
    before = sys.excepthook
    if getattr(before, "_elastic", False) or _owner is None:
        return

    def excepthook(kind: "Any", value: "Any", trace: "Any") -> None:
        try:
            _part("rank_signals").on_uncaught(kind, value)
        except Exception:  # never in the way of the interpreter's report
            pass
        before(kind, value, trace)

    excepthook._elastic = True  # type: ignore[attr-defined]
    sys.excepthook = excepthook


def _chain() -> None:
    """Import the ``sitecustomize`` that Python would have found without this folder."""
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]
    ours = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # type: ignore[import-not-found]  # noqa: F401  the next one on sys.path
    except ModuleNotFoundError as error:
        if error.name != "sitecustomize":
            raise
        if ours is not None:
            sys.modules["sitecustomize"] = ours  # none other: this one stays the module of that name


class _WatchedEnviron(type(os.environ)):  # type: ignore[misc]
    """``os.environ`` in a warm interpreter from start-up to its last import: the same variables
    (the same data, through the original's encoders), each name read noted in :attr:`reads`.
    ``prewarm.py`` compares the names with the attempt's variables and puts :attr:`original` back."""

    def __init__(self, original: "Any") -> None:
        super().__init__(original._data, original.encodekey, original.decodekey,
                         original.encodevalue, original.decodevalue)
        self.original = original
        self.reads: "set[str]" = set()

    def __getitem__(self, key: str) -> str:
        self.reads.add(key)
        return super().__getitem__(key)  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        self.reads.add(str(key))
        return super().__contains__(key)  # type: ignore[no-any-return]


def _watch_environ() -> None:
    """In a warm interpreter that must not have read an attempt's variables (``prewarm.py``), watch
    ``os.environ`` before the next ``sitecustomize`` runs: one that reads ``RANK`` at start-up saw
    it absent, and the rank has to start cold."""
    if os.environ.get(_WATCH_VAR) == "1" and not isinstance(os.environ, _WatchedEnviron):
        os.environ = _WatchedEnviron(os.environ)


def _mark_interpreter() -> None:
    """The ``interpreter`` mark of ``startup_marks.py``, written here without loading it (a cold rank
    pays for no ``json``); a warm interpreter has no rank variables yet and writes it when handed one."""
    path = os.environ.get(_STARTUP_FILE_VAR)
    if not path:
        return
    import time

    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, ('{"mark": "interpreter", "time": %r, "pid": %d}\n' % (time.time(), os.getpid())).encode())
        finally:
            os.close(fd)
    except OSError:
        pass


if __name__ == "sitecustomize":  # imported by site at start-up, not as elastic.worker.bootstrap.sitecustomize
    _mark_interpreter()
    _install()
    _watch_signals()
    _watch_excepthook()
    _watch_environ()  # after this file's own reads, before the next sitecustomize's
    _chain()
