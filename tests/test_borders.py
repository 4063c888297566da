"""The command line and the dashboard reach the queue only through :class:`recruiter.Queue`
and :mod:`recruiter.monitoring.listing`: no module of ``recruiter/cli`` or
``recruiter/web`` imports the store (at run time or for the type checker), names it in
a string to import, or reaches the ``.store`` of a queue."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "recruiter"
EDGES = sorted(path for edge in ("cli", "web") for path in (PACKAGE / edge).rglob("*.py"))
STORE = "recruiter.store"


def module_of(path: Path) -> str:
    """``recruiter/cli/top.py``: ``recruiter.cli.top``."""
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def _absolute(node: ast.ImportFrom, module: str) -> str:
    """The module a ``from … import`` names, relative ones made absolute."""
    if not node.level:
        return node.module or ""
    package = module.split(".")[: -node.level]
    return ".".join([*package, *([node.module] if node.module else [])])


def _is_store(module: str) -> bool:
    return module == STORE or module.startswith(STORE + ".")


def reaches_of_the_store(source: str, module: str) -> list[str]:
    """Each place in ``source`` (of ``module``) that reaches the store, as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if _is_store(a.name)]
        elif isinstance(node, ast.ImportFrom):
            source_module = _absolute(node, module)
            names = [f"{source_module}.{alias.name}" for alias in node.names]
            if any(_is_store(name) for name in (source_module, *names)):
                found.append(f"{node.lineno}: from {source_module} import …")
        elif isinstance(node, ast.Attribute) and node.attr == "store":
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and _is_store(str(node.value)):
            found.append(f"{node.lineno}: {node.value!r}")
    return found


def test_the_edges_are_found() -> None:
    names = {path.relative_to(PACKAGE).as_posix() for path in EDGES}
    assert {"cli/top.py", "cli/options.py", "web/views.py", "web/actions.py"} <= names


@pytest.mark.parametrize("path", EDGES, ids=lambda path: path.relative_to(PACKAGE).as_posix())
def test_the_command_line_and_the_dashboard_do_not_reach_the_store(path: Path) -> None:
    assert reaches_of_the_store(path.read_text(), module_of(path)) == [], (
        "read through recruiter.monitoring.listing, act through recruiter.Queue"
    )


@pytest.mark.parametrize(
    "source",
    [
        "from recruiter.store import Store",
        "from recruiter.store.progress import ReportingJob",
        "from recruiter import store",
        "import recruiter.store.schedulers",
        "from ..store import Store",
        "if TYPE_CHECKING:\n    from recruiter.store import Store",
        "def f(queue):\n    return queue.store.workers()",
        "importlib.import_module('recruiter.store')",
    ],
)
def test_every_way_of_reaching_the_store_is_caught(source: str) -> None:
    assert reaches_of_the_store(source, "recruiter.cli.example"), source
