"""The package's layers import only downward, and the pure core stays pure (ARCHITECTURE.md).

Read from the source with :mod:`ast`, so an import inside a function or under
``TYPE_CHECKING`` counts too: a layer that needs another only lazily still
depends on it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "elastic"

# What each layer may import of the package, besides itself. ``worker`` is the
# contract with training scripts (variable names, file formats), stdlib-only,
# so every layer may read it. The driver (run) talks to backends through their
# protocol only; the CLI and the top-level modules (the public surface, the
# fakes in elastic.testing, the compatibility aliases) wire everything.
ALLOWED: dict[str, set[str]] = {
    "worker": set(),
    "core": {"worker"},
    "node": {"core", "worker"},
    "backends": {"core", "node", "worker"},
    "views": {"core", "worker"},
    "run": {"core", "node", "worker", "views", "backends.protocol"},
    "cli": {"core", "node", "run", "views", "backends", "worker"},
}
# Modules no core module imports, directly or lazily: effects live in the shell.
# (``signal`` is allowed: the core names signals, ``signal.Signals``, and sends none.)
IMPURE = {"ray", "subprocess", "time", "logging", "structlog", "threading", "random", "socket"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; ``from x import y`` also counts ``x.y``)."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert 0 == node.level, f"{path}: relative imports are not used in elastic"
            assert node.module is not None
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _layer(module: str) -> str | None:
    """``core`` for ``elastic.core.launch.plan``; None for top-level modules (elastic, elastic.testing)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else None


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _reaches(imported: str, allowed: str) -> bool:
    return imported == f"elastic.{allowed}" or imported.startswith(f"elastic.{allowed}.")


@pytest.mark.parametrize("module", [m for m in MODULES if _layer(m) is not None])
def test_a_layer_imports_only_the_layers_below_it(module: str) -> None:
    """A module in elastic/LAYER imports only its own layer and those ALLOWED for it."""
    layer = _layer(module)
    assert layer in ALLOWED, f"{module}: a new layer needs a row in ALLOWED (and in ARCHITECTURE.md)"
    allowed = {layer, *ALLOWED[layer]}
    wrong = sorted(
        name
        for name in _imports(MODULES[module])
        if name.startswith("elastic.")
        and name in MODULES  # ``from elastic.core import plan`` names the module elastic.core.launch.plan
        and _layer(name) is not None
        and not any(_reaches(name, a) for a in allowed)
    )
    assert [] == wrong


# The one exception to a stdlib-only worker layer: a helper that initializes a framework
# imports it inside the function the script calls, never when the module is imported.
# The rank bootstrap imports the `sitecustomize` that it stands in front of (whatever
# the rank's Python would have imported), at start-up, inside a function.
LAZY_FRAMEWORK_IMPORTS: dict[str, set[str]] = {
    "elastic.worker.jax": {"jax"},
    "elastic.worker.bootstrap.sitecustomize": {"sitecustomize"},
    "elastic.worker.inplace.generations": {"torch"},
    "elastic.worker.inplace.snapshot": {"torch"},
    "elastic.worker.inplace.store_host": {"torch"},
}


def _module_level_imports(path: Path) -> set[str]:
    """What ``path`` imports outside its functions (what importing the module runs)."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
        pending.extend(ast.iter_child_nodes(node))
    return names


@pytest.mark.parametrize("module", [m for m in MODULES if _layer(m) == "worker"])
def test_the_worker_layer_imports_only_the_standard_library(module: str) -> None:
    """What training scripts import needs nothing beyond Python itself (and elastic.worker);
    a framework's own helper imports that framework only inside the function a script calls."""
    lazy = LAZY_FRAMEWORK_IMPORTS.get(module, set())
    outside = sorted(
        name
        for name in _imports(MODULES[module])
        if name.split(".")[0] not in sys.stdlib_module_names and not _reaches(name, "worker")
        and name.split(".")[0] not in lazy
    )
    assert [] == outside
    assert set() == {name.split(".")[0] for name in _module_level_imports(MODULES[module])} & lazy


@pytest.mark.parametrize("module", [m for m in MODULES if _layer(m) == "core"])
def test_the_core_imports_no_effects(module: str) -> None:
    """No Ray, processes, clocks, randomness, threads or logging in elastic/core."""
    assert [] == sorted(name for name in _imports(MODULES[module]) if name.split(".")[0] in IMPURE)


def test_every_module_sits_in_a_layer_or_is_public_surface() -> None:
    """The top level holds only the public surface: the package, __main__, the fakes, compatibility aliases."""
    top = sorted(m for m in MODULES if _layer(m) is None)
    expected = ["elastic", "elastic.__main__", "elastic.errorfile", "elastic.heartbeat", "elastic.testing"]
    assert expected == top


def test_importing_the_core_loads_no_shell() -> None:
    """The whole core in a fresh interpreter loads no Ray, structlog, subprocess or shell module.

    (``logging`` is loaded, by transitions and tenacity, the core's two
    libraries; that the core itself never logs is checked from its source above.)
    """
    core = [m for m in MODULES if _layer(m) == "core"]
    shell = ["ray", "structlog", "subprocess", "elastic.run", "elastic.node", "elastic.cli", "elastic.backends"]
    code = f"import sys\nfor name in {core!r}: __import__(name)\nprint(sorted(m for m in {shell!r} if m in sys.modules))\n"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "[]" == loaded.stdout.strip()
