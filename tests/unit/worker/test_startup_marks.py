"""What the rank bootstrap says a rank imported: installed packages only, first import first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_imported_modules_are_the_installed_packages_and_their_modules_one_level_down(tmp_path: Path) -> None:
    """A package in a site-packages folder is named, and each module of it one level down (once,
    first import first); deeper modules, the standard library, a private package, the script's own
    module and an editable checkout's are not."""
    site = tmp_path / "venv" / "lib" / "site-packages"
    for name in ("zeta_pkg", "zeta_pkg/sub", "alpha_pkg", "_private_pkg"):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
    (site / "zeta_pkg" / "sub" / "deep.py").write_text("")
    (site / "alpha_pkg" / "_inner.py").write_text("")
    (tmp_path / "own_module.py").write_text("")
    program = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        "import json, own_module, zeta_pkg.sub.deep, _private_pkg, alpha_pkg._inner\n"
        "from elastic.worker.bootstrap.startup_marks import imported_modules\n"
        "print(json.dumps(imported_modules()))\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", program, str(site), str(tmp_path)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )

    found = json.loads(shown.stdout)
    assert ["zeta_pkg", "zeta_pkg.sub", "alpha_pkg", "alpha_pkg._inner"] == [
        name for name in found if name.partition(".")[0].endswith("_pkg")
    ]
    assert not {"json", "own_module", "_private_pkg", "elastic"} & {name.partition(".")[0] for name in found}


_FAILING_INIT = """
import json, sys, traceback, types
from elastic.worker.bootstrap.startup_marks import on_torch_c10d

c10d = types.ModuleType("c10d")
def init_process_group(backend):
    raise RuntimeError("Distributed package doesn't have NCCL built in")
c10d.init_process_group = init_process_group
on_torch_c10d(c10d)
if sys.argv[1] == "traced":
    def tracer(frame, event, arg):
        return None
    sys.settrace(tracer)
def train():
    try:
        c10d.init_process_group("nccl")
    except RuntimeError:
        shown = traceback.format_exc()
    again = None
    try:
        c10d.init_process_group("nccl")  # a second call: no marks, the same traceback
    except RuntimeError:
        again = traceback.format_exc()
    print(json.dumps({"shown": shown, "again": again, "trace": repr(sys.gettrace())}))
    c10d.init_process_group("nccl")  # uncaught: sys.excepthook prints it
train()
"""


def test_a_marked_call_that_raises_shows_no_elastic_frame_in_the_callers_traceback(tmp_path: Path) -> None:
    """init_process_group wrapped for its marks raises: the traceback the caller formats, and the one
    the interpreter prints, go from the caller straight to the function, as without elastic; both
    marks are written, and no trace function is left behind."""
    startup = tmp_path / "rank-0.startup"
    ran = subprocess.run([sys.executable, "-c", _FAILING_INIT, "plain"], capture_output=True, text=True, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "ELASTIC_STARTUP_FILE": str(startup)})

    assert 1 == ran.returncode, ran.stderr
    seen = json.loads(ran.stdout)
    for shown in (seen["shown"], seen["again"], ran.stderr):
        assert "startup_marks.py" not in shown, shown
        files = [line.strip() for line in shown.splitlines() if line.strip().startswith("File ")]
        assert ["train", "init_process_group"] == [line.rpartition(" in ")[2] for line in files][-2:], shown
    assert "None" == seen["trace"]
    assert ["init_begin", "init_end"] == [json.loads(line)["mark"] for line in startup.read_text().splitlines()
                                          if json.loads(line)["mark"] != "imports"]


def test_under_a_trace_function_of_its_own_the_wrapper_is_left_in_the_traceback(tmp_path: Path) -> None:
    """A debugger or coverage tracing the rank keeps its trace function; the wrapper's entry then stays."""
    ran = subprocess.run([sys.executable, "-c", _FAILING_INIT, "traced"], capture_output=True, text=True, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})

    seen = json.loads(ran.stdout)
    assert "startup_marks.py" in seen["shown"]
    assert "tracer" in seen["trace"]
