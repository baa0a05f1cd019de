"""A warm interpreter: imports the named modules, then becomes a rank running a script or module.

The spawner's pool (:mod:`elastic.node.spawner.prewarm_pool`) starts one of these per rank while an
attempt runs, for the next attempt: ``PYTHON prewarm.py CONTROL_FD PATH0
WATCHED MODULE...``, in a session of its own, with the rank's environment minus the
variables that change with each attempt (:data:`elastic.core.launch.spec.LAUNCH_VARIABLES`).
It imports the modules, then blocks on its control pipe. ``WATCHED`` is ``-``, or
(for modules elastic learned from the rank, not ones ``--prewarm`` names) those
variables' names, comma-separated: reading one through ``os.environ`` at start-up
(in a ``sitecustomize``: the rank bootstrap watches from before the next one runs)
or while importing means it was seen absent, and the rank starts cold. The launch message
carries the rank's ``argv``, complete environment, working directory and log;
from there the rank runs as ``python SCRIPT ARGS`` or ``python -m MODULE ARGS``
would run it: ``os.environ`` replaced by the rank's, ``sys.argv``,
``sys.orig_argv``, ``sys.path[0]`` (``PATH0``: the script's real directory, or
the working directory for ``-m``, already in place during the imports), a fresh
``__main__`` module, stdin from ``/dev/null``, stdout and stderr to the rank's
log (what the imports printed first), and the rank's command as its process title
(what ``ps`` and ``pgrep -f`` show: :func:`_take_title`). A module is run by runpy's
``_run_module_as_main``, the function CPython itself calls for ``-m``.

It falls back to a cold start, ``exec`` of the rank's own command in this
same process (same pid, session and cgroup), when the spawner says so, when
an import failed (a failed import may leave half a framework in
``sys.modules``, which no script should inherit), when the start-up or an import
read a ``WATCHED`` variable, or for ``-m`` on a Python whose runpy lacks that function.

Standard library only, and no import beyond what the interpreter loads anyway
before the modules named: nothing of elastic's must be in ``sys.modules``
when the framework and the script are imported.
"""

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    import types

_EXEC_FAILED_STATUS = 127


def _read_exactly(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return data
        data += chunk
    return data


def _receive(fd: int) -> "dict[str, object] | None":
    import marshal  # built in: loads nothing from disk

    header = _read_exactly(fd, 4)
    if len(header) < 4:
        return None
    payload = _read_exactly(fd, int.from_bytes(header, sys.byteorder))
    message: "dict[str, object]" = marshal.loads(payload)
    return message


def _cold(argv: "list[str]", env: "dict[str, str]") -> None:
    """Become the rank by ``exec``, as the spawner's cold path does; never returns."""
    try:
        os.execvpe(argv[0], argv, env)
    finally:
        os._exit(_EXEC_FAILED_STATUS)


def _redirect(log_path: str, replay_fd: int) -> None:
    """stdin from /dev/null; stdout and stderr to the log, after what the imports wrote."""
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.lseek(replay_fd, 0, os.SEEK_SET)
    while chunk := os.read(replay_fd, 1 << 16):
        os.write(log_fd, chunk)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    for fd in (null_fd, log_fd, replay_fd):
        os.close(fd)


def _fresh_main(**dunders: object) -> None:
    """A new ``__main__`` module in ``sys.modules``, its names in a cold start's order."""
    import types

    main = types.ModuleType("__main__")  # __name__, __doc__, __package__, __loader__, __spec__
    vars(main).update(dunders)
    sys.modules["__main__"] = main


def _run_main(argv: "list[str]") -> None:
    """Run the rank's script or module as ``__main__``, as ``python ARGV[1:]`` would."""
    try:
        if argv[1] == "-m":
            import runpy

            _prepare_module(argv)
            runpy._run_module_as_main(argv[2])  # type: ignore[attr-defined]
        else:
            exec(_prepare_script(argv), sys.modules["__main__"].__dict__)
    except (SystemExit, KeyboardInterrupt):
        raise  # the interpreter prints and exits as it does for a script
    except BaseException:  # noqa: BLE001 - what an uncaught exception does: print it, exit 1
        kind, error, trace = sys.exc_info()
        while trace is not None and trace.tb_frame.f_code.co_filename == __file__:
            trace = trace.tb_next  # a cold start's frames only: the script's, or runpy's and the module's
        sys.excepthook(kind, error.with_traceback(trace), trace)  # type: ignore[arg-type, union-attr]
        del kind, error, trace
        sys.exit(1)


def _prepare_script(argv: "list[str]") -> "types.CodeType":
    """Set up ``python argv[1] argv[2:]``: ``sys.argv``, a fresh ``__main__``; the script's code."""
    import importlib.machinery

    script = argv[1]
    # __main__.__file__ is absolute since Python 3.9, made so as CPython does (_Py_abspath: no normalising).
    path = script if os.path.isabs(script) else os.getcwd() + os.sep + script
    sys.argv = list(argv[1:])
    sys.orig_argv = list(argv)
    with open(path, "rb") as source_file:
        source = source_file.read()
    _fresh_main(  # the rest, in a cold start's order
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
        __annotations__={},
        __builtins__=sys.modules["builtins"],
        __file__=path,
        __cached__=None,
    )
    return compile(source, path, "exec", dont_inherit=True)


def _prepare_module(argv: "list[str]") -> None:
    """Set up ``python -m argv[2] argv[3:]`` for runpy's ``_run_module_as_main``, as CPython does.

    ``__main__`` is the interpreter's first module (its loader the built-in
    importer until runpy sets the module's) and ``sys.argv[0]`` is ``-m`` while
    the module and its parent packages are found and imported; runpy then puts
    the module's file there and runs its code in ``__main__``'s namespace.
    """
    import importlib.machinery

    sys.argv = ["-m", *argv[3:]]
    sys.orig_argv = list(argv)
    _fresh_main(
        __loader__=importlib.machinery.BuiltinImporter,
        __annotations__={},
        __builtins__=sys.modules["builtins"],
    )


def _mark_handed() -> None:
    """The rank's ``interpreter`` start-up mark, written now that it has its rank: what the
    bootstrap's ``sitecustomize`` writes at a cold start (the same line, see its ``_mark_interpreter``)."""
    path = os.environ.get("ELASTIC_STARTUP_FILE")
    if not path:
        return
    import time  # built in

    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, ('{"mark": "interpreter", "time": %r, "pid": %d}\n' % (time.time(), os.getpid())).encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _title_setter() -> "tuple[types.ModuleType, str] | None":
    """``setproctitle``'s C module, ready, where the rank's Python has it, and the process's short
    name (``comm``) from before (its readying sets it from the title); None where not.

    Loaded without its package (which imports ``logging``): no module a cold rank lacks is
    left in ``sys.modules``. Readied (its first call) while the C ``environ`` is still the one
    the interpreter started with, right after the ``argv`` memory the title may use: it moves
    that ``environ`` elsewhere then, and finds no room for a title once ``os.environ`` was changed.
    """
    import importlib.machinery  # what the script's or the module's loader needs next anyway

    name = "setproctitle._setproctitle"
    for entry in sys.path:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(entry or ".", "setproctitle", "_setproctitle" + suffix)
            if not os.path.isfile(path):
                continue
            try:
                loader = importlib.machinery.ExtensionFileLoader(name, path)
                module = loader.create_module(importlib.machinery.ModuleSpec(name, loader, origin=path))
                loader.exec_module(module)
                short_name = module.getthreadtitle()
                module.getproctitle()
                module.setthreadtitle(short_name)
            except Exception:  # noqa: BLE001 - a title never stops the rank: it keeps the waiting one's
                return None
            return module, short_name
    return None


def _take_title(setter: "tuple[types.ModuleType, str] | None", argv: "list[str]") -> None:
    """The rank's command as this process's title: what ``ps``, ``top``, ``pgrep -f`` and
    ``/proc/PID/cmdline`` show (the waiting interpreter's command line otherwise).
    ``/proc/PID/environ`` then shows what the title left of the memory the interpreter's
    environment started in, never the rank's. The short name (``/proc/PID/comm``, ``pgrep``
    without ``-f``) stays the interpreter's, as a cold rank's is."""
    if setter is None:
        return
    module, short_name = setter
    try:
        module.setproctitle(" ".join(argv))
        module.setthreadtitle(short_name)
    except Exception:  # noqa: BLE001 - a title never stops the rank
        pass


def _runs_here(argv: "list[str]") -> bool:
    """Whether this interpreter can run the command in place (``-m`` needs runpy's ``_run_module_as_main``)."""
    if argv[1] != "-m":
        return True
    import runpy  # what python -m imports too

    return hasattr(runpy, "_run_module_as_main")


def _reads() -> "set[str] | None":
    """The names read so far through the watching ``os.environ`` that the rank bootstrap put in
    place at start-up (its ``sitecustomize``, asked to by ``_ELASTIC_PREWARM_WATCH``); None
    without one (``--rank-bootstrap off``, ``-E``): then nothing can tell what was read."""
    reads = getattr(os.environ, "reads", None)
    return reads if isinstance(reads, set) else None


def _import(modules: "list[str]", watched: "frozenset[str]") -> bool:
    """Import the modules; False (the rank starts cold) when one failed, or when the interpreter's
    start-up or an import read one of the ``watched`` variables (an attempt's: absent here, so it
    saw the wrong value)."""
    reads = _reads() if watched else set()

    def read_watched(what: str) -> bool:
        if reads is None:
            sys.stderr.write("elastic: no rank bootstrap watched this interpreter's start-up: this rank starts cold\n")
            return True
        seen = sorted(reads & watched)
        if seen:
            sys.stderr.write(f"elastic: {what} read {', '.join(seen)}, which each attempt sets anew: "
                             "this rank starts cold\n")
        return bool(seen)

    try:
        if read_watched("this interpreter's start-up (a sitecustomize or usercustomize)"):
            return False
        for module in modules:
            __import__(module)
            if read_watched(f"importing {module}"):
                return False
    except BaseException:  # noqa: BLE001 - any failure: the rank starts cold
        import traceback

        traceback.print_exc()
        return False
    finally:
        os.environ = getattr(os.environ, "original", os.environ)
    return True


def main() -> None:
    control_fd = int(sys.argv[1])
    path0 = sys.argv[2]
    watched = frozenset(sys.argv[3].split(",")) if sys.argv[3] != "-" else frozenset()
    modules = sys.argv[4:]
    replay_fd = os.dup(1)  # the spawner made stdout and stderr one anonymous file
    if not sys.flags.safe_path:
        sys.path[0] = path0  # what ``python SCRIPT`` or ``python -m MODULE`` puts first
    imported = _import(modules, watched)
    message = _receive(control_fd)
    if message is None:
        os._exit(0)  # the spawner is gone, or dropped us: nothing to run
    os.close(control_fd)
    argv = [str(a) for a in message["argv"]]  # type: ignore[attr-defined]
    env = {str(k): str(v) for k, v in message["env"].items()}  # type: ignore[attr-defined]
    cwd = message.get("cwd")
    try:
        _redirect(str(message["log_path"]), replay_fd)
        if cwd is not None:
            os.chdir(str(cwd))
    except OSError:
        os._exit(_EXEC_FAILED_STATUS)
    if not imported or message.get("cold") or not _runs_here(argv):
        _cold(argv, env)
    title = _title_setter()
    os.environ.clear()
    os.environ.update(env)
    del message, env
    _mark_handed()
    _take_title(title, argv)
    del title
    _run_main(argv)


if __name__ == "__main__":
    main()
