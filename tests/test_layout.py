"""The shape of the code, held as the design says (docs/internals/architecture.md): no
import circle, the driver only in the store, the public face true to what it exports;
and a prompt to look again at a module or a function that grows long.

These read the source; nothing runs. The import rules are walls. The sizes are a review
prompt: a module past its allowance is a question, "does a second concept live here?".
Split it where a concept ends, or, where the concept is honestly bigger, give it an
allowance below with the reason; never carve a module off only to get under a number.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import recruiter

PACKAGE = Path(recruiter.__file__).parent
MOST_LINES_PER_MODULE = 500
MOST_LINES_PER_FUNCTION = 60
LONGER_MODULES: dict[str, tuple[int, str]] = {}
"""Modules allowed more lines than :data:`MOST_LINES_PER_MODULE`: name -> (lines, why)."""
LONGER_FUNCTIONS: dict[str, tuple[int, str]] = {}
"""Functions (``module.function``) allowed more than :data:`MOST_LINES_PER_FUNCTION`:
name -> (lines, why)."""
DRIVER = ("pymongo", "bson.errors", "gridfs", "motor")
"""The driver's modules: only the store (and the module that opens the connection) may
import them. ``bson`` itself (ObjectId, the codec) is data, shared by every layer."""
MAY_IMPORT_THE_DRIVER = ("store", "connection.py")


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = modules()


def imported(tree: ast.AST) -> set[str]:
    """The names of every module ``tree`` imports, at run time or for type checking
    alone: ``from a import b`` names ``a.b`` when that is a module, else ``a``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                whole = f"{node.module}.{alias.name}"
                names.add(whole if whole in MODULES else node.module)
    return names


GRAPH = {
    name: imported(ast.parse(path.read_text())) & MODULES.keys() for name, path in MODULES.items()
}


LOOK_AGAIN = (
    "look at these: split where a concept ends, or, where the concept is honestly bigger, "
    "give it an allowance with its reason in tests/test_layout.py"
)


def test_a_module_past_its_allowance_is_looked_at_again() -> None:
    long = {}
    for name, path in MODULES.items():
        most = LONGER_MODULES.get(name, (MOST_LINES_PER_MODULE, ""))[0]
        if (lines := len(path.read_text().splitlines())) > most:
            long[name] = f"{lines} lines, {most} allowed"
    assert long == {}, LOOK_AGAIN


def test_a_function_past_its_allowance_is_looked_at_again() -> None:
    long = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                where = f"{name}.{node.name}"
                most = LONGER_FUNCTIONS.get(where, (MOST_LINES_PER_FUNCTION, ""))[0]
                if lines > most:
                    long.append(f"{where} ({lines} lines, {most} allowed)")
    assert long == [], LOOK_AGAIN


def test_every_allowance_says_why_and_is_still_needed() -> None:
    """An allowance names what makes the concept bigger, and goes when the code no
    longer needs it."""
    for name, (_, why) in LONGER_MODULES.items():
        assert why, name
        assert name in MODULES, name
        assert len(MODULES[name].read_text().splitlines()) > MOST_LINES_PER_MODULE, name
    for where, (_, why) in LONGER_FUNCTIONS.items():
        assert why, where
        assert where.rpartition(".")[0] in MODULES, where


def test_no_import_circle() -> None:
    """No module reaches itself through its imports, counting those made for type
    checking alone (a circle there is a design's circle all the same)."""
    circles = []
    for start in GRAPH:
        path = _path_back(start)
        if path is not None:
            circles.append(" -> ".join(path))
    assert circles == []


def _path_back(start: str) -> list[str] | None:
    """A path of imports from ``start`` back to it (a package's own ``__init__``
    importing its modules is not a circle: it is how the package is made)."""
    stack, seen = [(start, [start])], set()
    while stack:
        name, path = stack.pop()
        for target in GRAPH[name]:
            if target == start and len(path) > 1 and not start.startswith(f"{path[1]}."):
                return [*path, start]
            if target not in seen and target != start and not start.startswith(f"{target}."):
                seen.add(target)
                stack.append((target, [*path, target]))
    return None


def test_only_the_store_imports_the_driver() -> None:
    outside = []
    for name, path in MODULES.items():
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(MAY_IMPORT_THE_DRIVER):
            continue
        for module in imported(ast.parse(path.read_text())):
            if module.startswith(DRIVER):
                outside.append(f"{name} imports {module}")
    assert outside == [], "reach the database through recruiter.store"


TYPED = {
    alias.name: node.module
    for node in ast.walk(ast.parse((PACKAGE / "__init__.py").read_text()))
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("recruiter.")
    for alias in node.names
}
"""Each public name and its module, as type checkers read them (the package's imports)."""


def test_the_package_exports_what_type_checkers_read() -> None:
    assert sorted(recruiter.__all__) == sorted(TYPED)


@pytest.mark.parametrize("name", sorted(TYPED))
def test_every_public_name_is_where_the_package_says(name: str) -> None:
    """``recruiter.X`` loads X from the module the package's table names, the one type
    checkers read it from: the two never disagree after a module moves."""
    assert recruiter.PUBLIC[TYPED[name]].count(name) == 1
    module = importlib.import_module(TYPED[name])
    assert getattr(module, name) is getattr(recruiter, name)
