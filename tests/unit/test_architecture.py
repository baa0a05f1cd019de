"""ARCHITECTURE.md stays true: every name it gives exists, and its layers are the tree's.

Names are resolved from the source with :mod:`ast`, never by importing, so
checking ``elastic.backends.ray.backend.RayBackend`` loads no Ray. A name re-exported
by an import (a class that moved to a helper module and is imported back) counts.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "elastic"
DOC = (ROOT / "ARCHITECTURE.md").read_text()

# ``elastic/core/journal/fold.py``, ``elastic/node/``; ``tests/unit/test_layers.py``.
PATHS = sorted({m.rstrip(".") for m in re.findall(r"(?<![\w./-])((?:elastic|tests)/[\w./-]*)", DOC)})
# ``elastic.core.controller.controller.Controller``; not ``elastic/``, not ``elastic[debug]``.
DOTTED = sorted(set(re.findall(r"(?<![\w./-])(elastic(?:\.[A-Za-z_]\w*)+)", DOC)))


def _module_file(module: str) -> Path | None:
    parts = module.split(".")
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def _text(path: Path) -> str:
    return path.read_text()


@cache
def _top_level(path: Path) -> dict[str, ast.AST]:
    """What a module binds at its top level: definitions, assignments, imports, ``__all__``."""
    names: dict[str, ast.AST] = {}
    tree = ast.parse(_text(path), str(path))
    body = list(tree.body)
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):  # ``if TYPE_CHECKING:`` re-exports, guarded imports
            body += [*node.body, *node.orelse, *getattr(node, "finalbody", []),
                     *(s for h in getattr(node, "handlers", []) for s in h.body)]
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                if isinstance(node.value, (ast.List, ast.Tuple)):
                    for item in node.value.elts:
                        if isinstance(item, ast.Constant) and isinstance(item.value, str):
                            names.setdefault(item.value, node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            for alias in node.names:
                names[alias.asname or alias.name] = node
    return names


def _resolves(dotted: str, depth: int = 0) -> bool:
    """Whether ``dotted`` names a module of the package, or a name (and a member of a class) in one."""
    assert depth < 10, f"{dotted}: a cycle of re-exports"
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        path = _module_file(".".join(parts[:split]))
        if path is None:
            continue
        rest = parts[split:]
        if not rest:
            return True
        if len(rest) > 2:
            return False
        bound = _top_level(path).get(rest[0])
        if bound is None:
            return False
        if isinstance(bound, ast.ImportFrom):  # a re-export: follow it to its source
            assert bound.module is not None
            alias = next(a for a in bound.names if (a.asname or a.name) == rest[0])
            return _resolves(".".join([bound.module, alias.name, *rest[1:]]), depth + 1)
        if len(rest) == 1:
            return True
        if not isinstance(bound, ast.ClassDef):
            return False
        members = {
            n.name if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) else getattr(n.target, "id", None)
            for n in bound.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.AnnAssign))
        }
        return rest[1] in members
    return False


def test_the_document_names_modules_and_paths() -> None:
    """The scans below see what the document is made of (a broken regex checks nothing)."""
    assert "elastic/core/policy/restarts.py" in PATHS and "tests/unit/test_layers.py" in PATHS
    assert "elastic.core.controller.controller.Controller" in DOTTED and "elastic.run.driver.Driver" in DOTTED


@pytest.mark.parametrize("path", PATHS)
def test_every_path_in_the_document_exists(path: str) -> None:
    assert (ROOT / path).exists(), f"ARCHITECTURE.md names {path}, which is not in the tree"


@pytest.mark.parametrize("dotted", DOTTED)
def test_every_dotted_name_in_the_document_exists(dotted: str) -> None:
    assert _resolves(dotted), f"ARCHITECTURE.md names {dotted}, which no module of elastic defines"


def test_the_resolver_refuses_what_is_not_there() -> None:
    assert _resolves("elastic.backends.ray.backend.RayBackend")
    assert _resolves("elastic.worker.atomic_checkpoint")  # re-exported under TYPE_CHECKING, loaded lazily
    assert _resolves("elastic.core.controller.controller.Controller.handle")
    assert not _resolves("elastic.core.controller.controller.NoSuchThing")
    assert not _resolves("elastic.core.controller.controller.Controller.no_such_method")
    assert not _resolves("elastic.no_such_module")


# Short names in code spans (`Controller.handle`, `DEFAULT_ACTIONS`, `on_exit`): a span
# with a capital or an underscore in it, or a dot after a capitalised name.
SHORT = sorted(
    span
    for span in set(re.findall(r"`(_?[A-Za-z]\w*(?:\.\w+)?)`", DOC))
    if not span.startswith("elastic") and (re.search(r"[A-Z_]", span.split(".")[0]))
)
# Names of the standard library or of the tests, not of the package.
NOT_OURS = {"TYPE_CHECKING", "signal.Signals", "ALLOWED"}


@cache
def _modules() -> dict[str, Path]:
    return {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sorted(PACKAGE.rglob("*.py"))
    }


@cache
def _class_members(path: Path) -> frozenset[str]:
    """The methods and annotated fields of every class in a module."""
    members: set[str] = set()
    for node in ast.walk(ast.parse(_text(path), str(path))):
        if isinstance(node, ast.ClassDef):
            for n in node.body:
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members.add(n.name)
                elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                    members.add(n.target.id)
    return frozenset(members)


def _defined_somewhere(name: str) -> bool:
    """A top-level name of some module (``Cls.member`` resolved there), or a member of some class."""
    head, _, member = name.partition(".")
    for module, path in _modules().items():
        if head in _top_level(path) and _resolves(f"{module}.{name}"):
            return True
        if not member and name in _class_members(path):
            return True
    # Not a Python name but a word the code spells: a variable, a record field.
    return any(f'"{name}"' in _text(path) for path in _modules().values())


def test_the_short_names_are_scanned() -> None:
    assert {"Controller.handle", "DEFAULT_ACTIONS", "KIND_COLORS", "on_exit"} <= set(SHORT)


@pytest.mark.parametrize("name", [s for s in SHORT if s not in NOT_OURS])
def test_every_short_name_in_the_document_is_defined(name: str) -> None:
    assert _defined_somewhere(name), f"ARCHITECTURE.md names `{name}`, which nothing in elastic defines"


def test_the_short_names_not_ours_are_still_named_as_they_are() -> None:
    assert "ALLOWED" in (Path(__file__).with_name("test_layers.py")).read_text()


def test_every_flag_in_the_document_is_an_option() -> None:
    from elastic.core.options.table import OPTIONS

    flags = set(re.findall(r"`(--[a-z][a-z-]*)", DOC))
    assert "--max-no-progress" in flags
    assert [] == sorted(flags - {opt.flag for opt in OPTIONS})


def _layer_table() -> dict[str, set[str]]:
    """The "Layers" table: each layer's package and the layers it may import."""
    section = DOC[DOC.index("## Layers") : DOC.index("\n## ", DOC.index("## Layers") + 1)]
    rows = [line for line in section.splitlines() if line.startswith("| `elastic/")]
    table: dict[str, set[str]] = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        layer = re.fullmatch(r"`elastic/(\w+)/`", cells[0])
        assert layer is not None, row
        table[layer.group(1)] = set(re.findall(r"`([\w.]+)`", cells[-1]))
    return table


def test_the_layers_are_the_packages_under_elastic() -> None:
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert packages == set(_layer_table())


def test_the_layers_may_import_what_test_layers_allows() -> None:
    """The document's "may import" column is the ALLOWED table that tests/unit/test_layers.py enforces."""
    spec = importlib.util.spec_from_file_location("_test_layers", Path(__file__).with_name("test_layers.py"))
    assert spec is not None and spec.loader is not None
    layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers)
    assert layers.ALLOWED == _layer_table()


def test_every_package_is_named_in_the_document() -> None:
    """A package added under elastic/ gets its row in ARCHITECTURE.md's package table."""
    packages = sorted(
        f"elastic/{path.parent.relative_to(PACKAGE).as_posix()}/"
        for path in PACKAGE.rglob("__init__.py")
        if path.parent != PACKAGE
    )
    assert [] == [package for package in packages if f"`{package}`" not in DOC]


def test_every_test_module_has_a_basename_of_its_own() -> None:
    """The document's rule: pytest imports a test module by its file name, so two of one name
    (tests/unit/core/test_x.py beside tests/process/test_x.py) break the suite's collection."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {} == {name: paths for name, paths in seen.items() if len(paths) > 1}
