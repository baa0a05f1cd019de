"""The frame that explains a hang, picked from real py-spy dumps (tests/fixtures/py_spy/capture.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.core.training.stack_frames import Frame, HangFrame, explain_hang, parse_dump

FIXTURES = Path(__file__).parents[3] / "fixtures" / "py_spy"


def _explained(name: str) -> HangFrame:
    explained = explain_hang(parse_dump((FIXTURES / f"{name}.txt").read_text()))
    assert explained is not None
    return explained


def test_a_native_dump_parses_into_processes_threads_and_frames() -> None:
    """Each frame keeps py-spy's name and place; Python and native frames are told apart."""
    [process] = parse_dump((FIXTURES / "nondaemon_thread.native.txt").read_text())

    assert (1139, None) == (process.pid, process.error)
    assert process.command.endswith("nondaemon_thread.py 0 29533")
    assert [("1139", "idle", "MainThread"), ("1140", "idle", "stuck-worker")] == [
        (t.thread_id, t.state, t.name) for t in process.threads
    ]
    main = process.main_thread()
    assert main is not None and "MainThread" == main.name
    assert [
        Frame("0x7f379c0a3f16", "libc.so.6", python=False),
        Frame("0x7f379c0aed90", "libc.so.6", python=False),
        Frame("PyThread_acquire_lock_timed", "libpython3.11.so.1.0", python=False),
        Frame("lock_PyThread_acquire_lock", "libpython3.11.so.1.0", python=False),
        Frame("_shutdown", "threading.py:1590", python=True),
        Frame("0x7f379c04524a", "libc.so.6", python=False),
    ] == list(main.frames)


def test_long_cpp_names_with_parentheses_and_source_files_parse() -> None:
    """Demangled C++ names keep their parentheses; a frame in callproc.c is native."""
    [process] = parse_dump((FIXTURES / "gloo_destructor.native.txt").read_text())
    [main] = process.threads
    names = [frame.name for frame in main.frames]
    assert any(name.startswith("pybind11::class_<c10d::ProcessGroup, (anonymous namespace)::") for name in names)
    assert not any(frame.python for frame in main.frames)
    [ctypes] = parse_dump((FIXTURES / "atexit_native.native.txt").read_text())
    assert Frame("_call_function_pointer", "callproc.c:943", python=False) in ctypes.threads[0].frames


@pytest.mark.parametrize(
    ("fixture", "described"),
    [
        (
            "lock.native",
            "is in wait_for_the_peer (lock.py:5), waiting in PyThread_acquire_lock_timed (libpython3.11.so.1.0)",
        ),
        (
            "lock_module.native",
            "is in wait_for_the_peer (lock_module.py:5), waiting in PyThread_acquire_lock_timed (libpython3.11.so.1.0)",
        ),
        ("sleep.native", "is in stuck_in_allreduce (sleep.py:3), waiting in clock_nanosleep (libc.so.6)"),
        (
            "gloo_allreduce.native",
            "is in c10d::Work::wait (libtorch_cpu.so), waiting in pthread_cond_wait (libc.so.6), "
            "called from all_reduce (torch/distributed/distributed_c10d.py:3252)",
        ),
        ("lock.plain", "is in wait_for_the_peer (lock.py:5), Python frames only"),
    ],
)
def test_a_running_main_thread_is_explained_by_its_innermost_frame_of_its_own(fixture: str, described: str) -> None:
    """Not at exit: the innermost native frame of the program (not libc's, the C++
    runtime's or the interpreter's), else the innermost Python frame; the wait inside it."""
    explained = _explained(fixture)

    assert explained.at_exit is None
    assert described == explained.describe()


@pytest.mark.parametrize(
    ("fixture", "at_exit", "described"),
    [
        (
            "gloo_destructor.native",
            "no Python frame left",
            "is at interpreter exit (no Python frame left), in c10d::ProcessGroupGloo::~ProcessGroupGloo "
            "(libtorch_cpu.so), waiting in std::thread::join (libstdc++.so.6.0.30)",
        ),
        (
            "atexit_native.native",
            "no Python frame left",
            "is at interpreter exit (no Python frame left), in pause (libc.so.6)",
        ),
        (
            "atexit_python.native",
            "in the at-exit handler or finalizer flush_metrics (atexit_python.py:3)",
            "is at interpreter exit (in the at-exit handler or finalizer flush_metrics (atexit_python.py:3)), "
            "in Condition.wait (threading.py:327), waiting in PyThread_acquire_lock_timed (libpython3.11.so.1.0)",
        ),
        (
            "atexit_lock.native",
            "in the at-exit handler or finalizer flush_metrics (atexit_lock.py:5)",
            "is at interpreter exit (in the at-exit handler or finalizer flush_metrics (atexit_lock.py:5)), "
            "waiting in PyThread_acquire_lock_timed (libpython3.11.so.1.0)",
        ),
        (
            "nondaemon_thread.native",
            "waiting for non-daemon threads to end: stuck-worker",
            "is at interpreter exit (waiting for non-daemon threads to end: stuck-worker), "
            "in _shutdown (threading.py:1590), waiting in PyThread_acquire_lock_timed (libpython3.11.so.1.0)",
        ),
        (
            "gloo_destructor.plain",
            "no Python frame left",
            "is at interpreter exit (no Python frame left), Python frames only",
        ),
    ],
)
def test_a_main_thread_at_interpreter_exit_says_so_and_what_it_waits_in(
    fixture: str, at_exit: str, described: str
) -> None:
    """No Python frame left, or an outermost Python frame that is not the script's: the
    interpreter is exiting; the frame is the program's innermost native one (a destructor
    the garbage collector runs at shutdown), else the wait itself."""
    explained = _explained(fixture)

    assert at_exit == explained.at_exit
    assert described == explained.describe()


@pytest.mark.parametrize("name", ["atexit_python", "nondaemon_thread", "lock_module"])
def test_python_3_12_dumps_read_the_same(name: str) -> None:
    """Dumps of Python 3.12 (another frame layout inside the interpreter) give the same frames."""
    old, new = _explained(f"{name}.native"), _explained(f"{name}.py312.native")

    assert (old.frame and old.frame.name, old.at_exit is None) == (new.frame and new.frame.name, new.at_exit is None)


def test_a_wrapper_shell_that_py_spy_cannot_read_is_skipped() -> None:
    """A group dump led by a shell (its dump failed) is explained by its Python child."""
    text = (
        "# native frames: taken\n"
        "Process 41: py-spy dump failed: Error: Failed to find python version from target process\n\n"
        + (FIXTURES / "lock.native.txt").read_text()
    )
    shell, child = parse_dump(text)

    assert (41, "py-spy dump failed: Error: Failed to find python version from target process") == (
        shell.pid, shell.error)
    assert not shell.threads
    explained = explain_hang((shell, child))
    assert explained is not None and explained.frame is not None
    assert "wait_for_the_peer" == explained.frame.name


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Process 7: py-spy dump timed out after 10.0s\n",
        "Process 7: not dumped, out of time\n",
        "py-spy not installed: pip install 'elastic-launch[debug]'\n",
    ],
)
def test_nothing_dumped_explains_nothing(text: str) -> None:
    """No process dumped (py-spy missing, timed out, out of time): no frame is made up."""
    assert None is explain_hang(parse_dump(text))
