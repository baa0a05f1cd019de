"""Every cross-reference in the package's docstrings and comments names something that exists.

A reference is a Sphinx role: ``:mod:``, ``:func:``, ``:class:``, ``:meth:``,
``:data:``, ``:attr:`` (and ``:exc:``, ``:obj:``) followed by a target in
backquotes. As in test_architecture.py, targets are resolved from the source
with ``ast``, never by importing a module of the package (a reference into
``elastic.backends.ray`` loads no Ray); a name bound by an import (a re-export)
is followed to where it is defined.

How a target resolves:

- a leading ``~`` or ``!`` and an explicit title (``title <target>``) are
  left aside;
- ``elastic.…`` is absolute: a module of the package, a name defined in one, or
  a member of a class there (methods, fields, class attributes, attributes its
  methods set on ``self``, and those of its base classes in the package);
- any other target is read where it is written, as Sphinx reads it: a member
  of the class the docstring or comment is in (``:meth:`sync``` inside
  ``RunDirectory``), else a name the module defines or imports, or a member of
  one (``:meth:`RunFold.closed``` where ``RunFold`` is defined or imported);
  else a builtin (``:class:`RuntimeError```) or a name of the standard library
  (``:func:`os.waitid```, looked up by importing the standard module); a
  ``:mod:`` target may also be a module beside the one it is written in
  (``:mod:`sitecustomize``` in ``elastic/worker/bootstrap/``).

A name of another module of the package is written with its full path
(``:func:`elastic.core.failures.classify```, shown short with ``~``); a name of a
third-party library goes in double backquotes, not in a role. Each role names
its kind: ``:mod:`` a module, ``:class:`` and ``:exc:`` a class, ``:func:`` a
function, ``:meth:`` a method, ``:attr:`` a class's or an instance's attribute
(a property too), ``:data:`` a module's value or a class attribute (an enum's
member, a type alias such as ``Observation = Union[...]``); a name imported from
outside the package is taken as it is.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "elastic"

ROLE = re.compile(r":(mod|func|class|meth|data|attr|exc|obj):`([^`]*)`")
MODULES = {
    ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
    for path in sorted(PACKAGE.rglob("*.py"))
}


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


@cache
def _top_level(path: Path) -> dict[str, ast.AST]:
    """What a module binds at its top level: definitions, assignments, imports, ``__all__``."""
    names: dict[str, ast.AST] = {}
    body = list(_tree(path).body)
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
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = node
    return names


def _class_members(cls: ast.ClassDef) -> dict[str, ast.AST]:
    """A class's methods, nested classes, fields and class attributes, and what its methods set on ``self``."""
    members: dict[str, ast.AST] = {}
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            members[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    members[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members[node.target.id] = node
    for method in cls.body:
        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(method):
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
                for target in targets:
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self"):
                        members.setdefault(target.attr, node)
    return members


def _kind(node: ast.AST, in_class: bool) -> str:
    """What a definition is: class, function, method, data (a module's), attribute (a class's or an instance's)."""
    if isinstance(node, ast.ClassDef):
        return "class"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        decorators = {d.id if isinstance(d, ast.Name) else getattr(d, "attr", "") for d in node.decorator_list}
        if in_class and decorators & {"property", "cached_property"}:
            return "attribute"
        return "method" if in_class else "function"
    return "attribute" if in_class else "data"


def _find(dotted: str, depth: int = 0) -> str | None:
    """What the absolute name ``dotted`` is in the package (a kind, or ``outside`` for a name
    imported from outside it), read from the source; None if nothing."""
    assert depth < 20, f"{dotted}: a cycle of re-exports"
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        path = MODULES.get(".".join(parts[:split]))
        if path is None:
            continue
        if split == len(parts):
            return "module"
        bound = _top_level(path).get(parts[split])
        return None if bound is None else _within(path, bound, parts[split], parts[split + 1:], depth)
    return None


def _within(path: Path, bound: ast.AST, name: str, rest: list[str], depth: int) -> str | None:
    """Follow ``rest`` from ``name``, which ``bound`` binds at the top of the module at ``path``."""
    if isinstance(bound, (ast.ImportFrom, ast.Import)):  # a re-export: follow it to its source
        if isinstance(bound, ast.ImportFrom):
            assert 0 == bound.level and bound.module is not None
            alias = next(a for a in bound.names if (a.asname or a.name) == name)
            source = f"{bound.module}.{alias.name}"
        else:
            alias = next(a for a in bound.names if (a.asname or a.name.split(".")[0]) == name)
            source = alias.name if alias.asname else name
        if source != "elastic" and not source.startswith("elastic."):
            return "outside"
        return _find(".".join([source, *rest]), depth + 1)
    node, in_class = bound, False
    for member in rest:
        if not isinstance(node, ast.ClassDef):
            return None
        found = _member(path, node, member, depth)
        if found is None:
            return None
        path, node = found
        in_class = True
    return _kind(node, in_class)


def _member(path: Path, cls: ast.ClassDef, member: str, depth: int) -> tuple[Path, ast.AST] | None:
    """``cls.member``, defined in the class or in one of its base classes that the package defines."""
    assert depth < 20, f"{cls.name}: a cycle of base classes"
    own = _class_members(cls).get(member)
    if own is not None:
        return path, own
    for base in cls.bases:
        if isinstance(base, ast.Subscript):  # Generic[T], Protocol[T]
            base = base.value
        if not isinstance(base, ast.Name):
            continue
        source: Path | None = path
        bound = _top_level(path).get(base.id)
        if isinstance(bound, ast.ImportFrom) and bound.module is not None:  # a base class imported
            alias = next(a for a in bound.names if (a.asname or a.name) == base.id)
            source = MODULES.get(bound.module)
            bound = None if source is None else _top_level(source).get(alias.name)
        if source is not None and isinstance(bound, ast.ClassDef):
            found = _member(source, bound, member, depth + 1)
            if found is not None:
                return found
    return None


def _standard(dotted: str) -> bool:
    """A builtin, or a name of the standard library (its module imported to look)."""
    parts = dotted.split(".")
    if hasattr(builtins, parts[0]):
        value: object = getattr(builtins, parts[0])
        rest = parts[1:]
    elif parts[0] in sys.stdlib_module_names:
        for split in range(len(parts), 0, -1):
            try:
                value = importlib.import_module(".".join(parts[:split]))
            except ImportError:
                continue
            rest = parts[split:]
            break
        else:
            return False
    else:
        return False
    for part in rest:
        if not hasattr(value, part):
            return False
        value = getattr(value, part)
    return True


# What each role may name (``outside``: a name imported from outside the package, taken as it is).
KINDS = {
    "mod": {"module"},
    "class": {"class", "outside"},
    "exc": {"class", "outside"},
    "func": {"function", "outside"},
    "meth": {"method"},
    "data": {"data", "attribute", "outside"},
    "attr": {"attribute"},
    "obj": {"class", "function", "method", "data", "attribute", "outside"},
}


def resolves(role: str, target: str, module: str, classes: tuple[str, ...] = ()) -> bool:
    """Whether ``target`` of ``role``, written in ``module`` inside the classes ``classes``, names something."""
    target = target.strip()
    title = re.fullmatch(r".*<(.+)>", target, re.DOTALL)
    if title:
        target = title.group(1)
    target = target.lstrip("~!")
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", target):
        return False
    if target == "elastic" or target.startswith("elastic."):
        candidates = [target]
    else:
        scopes = [".".join([module, *classes[:k]]) for k in range(len(classes), -1, -1)]
        candidates = [f"{scope}.{target}" for scope in scopes]
        if role == "mod":
            candidates.append(f"{module.rpartition('.')[0]}.{target}")
    for candidate in candidates:
        if _find(candidate) in KINDS[role]:
            return True
    return not target.startswith("elastic") and _standard(target) and (
        role != "mod" or target.split(".")[0] in sys.stdlib_module_names)


def _enclosing_classes(tree: ast.Module) -> dict[int, tuple[str, ...]]:
    """For each line inside a class, the classes it is in, outermost first."""
    lines: dict[int, tuple[str, ...]] = {}

    def visit(node: ast.AST, outer: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = outer
            if isinstance(child, ast.ClassDef):
                inner = (*outer, child.name)
                assert child.end_lineno is not None
                for line in range(child.lineno, child.end_lineno + 1):
                    lines[line] = inner
            visit(child, inner)

    visit(tree, ())
    return lines


def references(path: Path) -> Iterator[tuple[int, str, str]]:
    """Every (line, role, target) in the module's docstrings (and strings standing as statements) and comments."""
    text = path.read_text()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            docstring = node.value.value
            for match in ROLE.finditer(docstring):
                yield node.lineno + docstring.count("\n", 0, match.start()), match.group(1), match.group(2)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            for match in ROLE.finditer(token.string):
                yield token.start[0], match.group(1), match.group(2)


def _unresolved() -> list[str]:
    wrong = []
    for module, path in MODULES.items():
        classes = _enclosing_classes(_tree(path))
        for line, role, target in references(path):
            if not resolves(role, target, module, classes.get(line, ())):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: :{role}:`{target}`")
    return wrong


def test_the_scan_sees_the_references(tmp_path: Path) -> None:
    """Docstrings, strings standing as statements and comments are read, at their lines (a broken
    scan checks nothing); other strings are not docs."""
    module = tmp_path / "module.py"
    module.write_text(
        '"""A module; see\n:mod:`elastic.core.failures`."""\n'
        "LIMIT = 3  # :data:`OTHER`\n"
        '"""What :data:`LIMIT` is."""\n'
        "class Thing:\n"
        '    """A thing; :meth:`go` and :attr:`~elastic.core.failures.WorkerExit.rank`."""\n'
        'TEXT = ":func:`not_a_reference`"\n'
    )
    assert [(2, "mod", "elastic.core.failures"), (4, "data", "LIMIT"), (6, "meth", "go"),
            (6, "attr", "~elastic.core.failures.WorkerExit.rank"), (3, "data", "OTHER")] == list(references(module))
    found = {(role, target) for path in MODULES.values() for _, role, target in references(path)}
    assert len(found) > 100


def test_the_resolver_follows_the_rule() -> None:
    module = "elastic.core.controller.controller"
    assert resolves("class", "elastic.core.controller.controller.Controller", module)
    assert resolves("class", "~elastic.backends.ray.agents.roster.Roster", module)
    assert resolves("meth", "Controller.handle", module)
    assert resolves("class", "WorkerExited", module)  # imported there
    assert resolves("meth", "handle", module, ("Controller",))  # the class the text is in
    assert resolves("meth", "elastic.testing.DiesOnCloseRayNodeAgent.next_events", module)  # its base's
    assert resolves("class", "RuntimeError", module)
    assert resolves("func", "os.waitid", module)
    assert resolves("mod", "sitecustomize", "elastic.worker.bootstrap.rank_signals")
    assert resolves("data", "elastic.core.exit_codes.ExitCode.NODES_UNAVAILABLE", module)  # an enum's member
    assert not resolves("meth", "handle", module)  # outside the class: Controller.handle
    assert not resolves("func", "root_cause", module)  # another module's: elastic.core.failures.root_cause
    assert not resolves("class", "elastic.core.controller.controller.NoSuchThing", module)
    assert not resolves("meth", "Controller.no_such_method", module)
    assert not resolves("mod", "elastic.no_such_module", module)
    assert not resolves("mod", "elastic.core.controller.controller.Controller", module)
    assert not resolves("class", "elastic.core.controller", module)
    assert not resolves("func", "Controller.handle", module)  # a method is :meth:
    assert not resolves("class", "elastic.core.messages.Observation", module)  # a type alias is :data:
    assert not resolves("func", "ray.get", module)


def test_every_reference_in_a_docstring_or_comment_resolves() -> None:
    assert [] == _unresolved()
