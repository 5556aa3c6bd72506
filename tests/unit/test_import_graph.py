"""The project's import graph, read from the source (nothing is imported): each package uses
only the layers below it (DESIGN.md §2), and no two of the project's modules import each other,
however indirectly, at import time.

For the layers every import counts, wherever it stands: one deferred into a function still ties
the packages together. For the cycles only imports that run when a module is imported count:
those at module level, not those inside functions (deferred on purpose) or under
``if TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cuset_core", "api", "worker", "db")
# DESIGN.md §2, the arrows one way: the core library uses none of the service; db/ is shared by
# api/ and worker/, which use it and the core but never each other (they meet in the database
# and the broker).
MAY_IMPORT: dict[str, set[str]] = {
    "cuset_core": set(),
    "db": {"cuset_core"},
    "api": {"db", "cuset_core"},
    "worker": {"db", "cuset_core"},
}

# Cycles known and accepted, each with its reason; every other cycle fails the test.
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "demo" not in path.relative_to(ROOT).parts  # problem and solution files, not project code
    }


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_nodes(body: list[ast.stmt]) -> list[ast.stmt]:
    """The import statements a module runs when imported: module level, inside try/if blocks,
    never inside functions or classes' methods or ``if TYPE_CHECKING``."""
    found: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and not _type_checking_only(node):
            found += _import_time_nodes(node.body) + _import_time_nodes(node.orelse)
        elif isinstance(node, ast.Try):
            found += _import_time_nodes(node.body)
            for handler in node.handlers:
                found += _import_time_nodes(handler.body)
            found += _import_time_nodes(node.orelse) + _import_time_nodes(node.finalbody)
    return found


def _every_import_node(body: list[ast.stmt]) -> list[ast.stmt]:
    """Every import statement of a module, wherever it stands."""
    return [node for stmt in body for node in ast.walk(stmt) if isinstance(node, ast.Import | ast.ImportFrom)]


def _imports(name: str, path: Path, modules: dict[str, Path], deferred: bool = False) -> set[str]:
    """The project modules ``name`` imports at import time, or anywhere with ``deferred``
    (``from a import b`` names the module ``a.b`` when that is one, else ``a``), with the
    packages that holds."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    find = _every_import_node if deferred else _import_time_nodes
    for node in find(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
            continue
        base = node.module or ""
        if node.level:
            anchor = name.split(".") if is_package else name.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            targets.add(candidate if candidate in modules else base)
    # Importing a.b.c runs a/__init__ and a/b/__init__ first: packages the importer is not inside count too.
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
    parents = {".".join(t.split(".")[:i]) for t in targets for i in range(1, t.count(".") + 1)}
    return {target for target in targets | (parents - own) if target in modules and target != name}


def import_graph(deferred: bool = False) -> nx.DiGraph:
    """Module -> the project modules it imports (at import time, or anywhere with ``deferred``)."""
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        graph.add_edges_from((name, target) for target in _imports(name, path, modules, deferred))
    return graph


def test_every_package_imports_only_the_layers_below_it():
    crossings = sorted(
        (source, target)
        for source, target in import_graph(deferred=True).edges
        if (above := source.split(".")[0]) != (below := target.split(".")[0]) and below not in MAY_IMPORT[above]
    )
    assert not crossings, crossings


def test_the_layer_check_sees_imports_deferred_into_functions():
    """A function-level import is an edge of the layer graph but not of the import-time one."""
    deferred = set(import_graph(deferred=True).edges)
    at_import = set(import_graph().edges)
    assert ("api.cli", "api.embedded") in deferred - at_import


def test_the_project_has_no_import_cycles_but_the_known_ones():
    cycles = [frozenset(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    unknown = [sorted(cycle) for cycle in cycles if cycle not in KNOWN_CYCLES]
    assert not unknown, unknown


def test_every_known_cycle_still_exists():
    """A cycle that was broken leaves the list, so the list stays the truth."""
    cycles = {frozenset(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1}
    assert not set(KNOWN_CYCLES) - cycles, sorted(sorted(c) for c in set(KNOWN_CYCLES) - cycles)
