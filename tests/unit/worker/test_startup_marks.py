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
