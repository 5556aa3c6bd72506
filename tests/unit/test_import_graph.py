"""The project's import graph, read from the source (nothing is imported): each package uses
only the layers below it (DESIGN.md §2), and no two of the project's modules import each other,
however indirectly.

Every import counts, wherever it stands: one deferred into a function still ties the modules
together, and deferring it only hides the circle from Python. Imports under
``if TYPE_CHECKING`` do not count for cycles (they never run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cuset_core", "api", "worker", "service", "db")
# DESIGN.md §2, the arrows one way: api/ and worker/ -> service/ -> db/ -> cuset_core/. The core
# library uses none of the service; db/ (storage) uses only the core; service/ (the decisions)
# is shared by api/ and worker/, which use it and the layers below but never each other (they
# meet in the database and the broker).
MAY_IMPORT: dict[str, set[str]] = {
    "cuset_core": set(),
    "db": {"cuset_core"},
    "service": {"db", "cuset_core"},
    "api": {"service", "db", "cuset_core"},
    "worker": {"service", "db", "cuset_core"},
}

# DESIGN.md §2 inside cuset_core: its sub-packages (and top-level modules) by floor, the ground
# first. Each imports only those on floors below its own, so no arrow runs back up; ``__init__``
# is the package itself (``cuset_core.__version__``).
CORE_FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"__init__", "paths"}),
    frozenset({"analysis", "adapters"}),
    frozenset({"verify", "models"}),
    frozenset({"generation", "model_install"}),
    frozenset({"data", "demo"}),
    frozenset({"evaluation", "objectives"}),
    frozenset({"training"}),
    frozenset({"improve"}),
    frozenset({"cli"}),
)

# DESIGN.md §2 inside cuset_core/verify/, the same way: its parts by role, the ground first. The
# shared types and settings, then the sandbox and tier 0's source tools, tier 1 (compile) beside the execution
# machinery tiers 2 and 3 share, the tiers themselves, and the pipeline callers use.
VERIFY_FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"__init__", "result", "candidate", "policy"}),
    frozenset({"settings"}),
    frozenset({"sandbox", "source", "cache"}),
    frozenset({"compile", "execution"}),
    frozenset({"canary", "cpu", "gpu"}),
    frozenset({"readiness", "run"}),
)

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
    """Every import statement of a module that can run, wherever it stands (functions included,
    ``if TYPE_CHECKING`` blocks left out)."""
    found: list[ast.stmt] = []
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and _type_checking_only(node):
            pending += node.orelse
        else:
            pending += ast.iter_child_nodes(node)
    return found


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


def crossings(edges: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The imports from one top-level package into another that ``MAY_IMPORT`` does not allow."""
    return sorted(
        (source, target)
        for source, target in edges
        if (above := source.split(".")[0]) != (below := target.split(".")[0]) and below not in MAY_IMPORT[above]
    )


def test_every_package_imports_only_the_layers_below_it():
    crossing = crossings(import_graph(deferred=True).edges)
    assert not crossing, crossing


def test_storage_uses_no_decision_and_the_decisions_use_neither_the_api_nor_the_workers():
    edges = [
        ("db.models", "service.jobs"),  # storage up into the decisions
        ("db.session", "worker.app"),
        ("service.jobs", "api.queries"),  # the decisions up into their callers
        ("service.dispatch", "worker.runtime"),
        ("api.routers.jobs", "worker.tasks.tune"),  # the two callers meet only in the database
        ("worker.tasks.tune", "service.jobs"),  # down: fine
        ("api.routers.jobs", "db.models"),
        ("service.jobs", "db.models"),
        ("db.models", "cuset_core.evaluation.metrics"),
    ]
    assert crossings(edges) == sorted(edges[:5])


def _part(module: str, package: str) -> str:
    """The sub-package or top-level module of ``package`` that ``module`` belongs to."""
    inside = module.removeprefix(package).removeprefix(".")
    return inside.split(".")[0] if inside else "__init__"


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def upward_arrows(
    edges: Iterable[tuple[str, str]],
    package: str = "cuset_core",
    floors: tuple[frozenset[str], ...] = CORE_FLOORS,
) -> list[tuple[str, str]]:
    """The imports between two parts of ``package`` that do not point to a lower floor."""
    floor = {part: level for level, parts in enumerate(floors) for part in parts}
    return sorted(
        (source, target)
        for source, target in edges
        if _inside(source, package)
        and _inside(target, package)
        and (above := _part(source, package)) != (below := _part(target, package))
        and floor[below] >= floor[above]
    )


@pytest.mark.parametrize(("package", "floors"), [("cuset_core", CORE_FLOORS), ("cuset_core.verify", VERIFY_FLOORS)])
def test_every_part_has_a_floor(package, floors):
    parts = {_part(module, package) for module in _modules() if _inside(module, package)}
    placed = set().union(*floors)
    assert parts <= placed, sorted(parts - placed)


@pytest.mark.parametrize(("package", "floors"), [("cuset_core", CORE_FLOORS), ("cuset_core.verify", VERIFY_FLOORS)])
def test_inside_a_package_each_part_imports_only_the_floors_below_it(package, floors):
    upward = upward_arrows(import_graph(deferred=True).edges, package, floors)
    assert not upward, upward


def test_an_import_up_a_floor_or_across_one_is_an_upward_arrow():
    edges = [
        ("cuset_core.analysis.sources", "cuset_core.generation.extract"),  # ground to floor 3
        ("cuset_core.verify.execution.judge", "cuset_core.models"),  # one floor, two parts
        ("cuset_core.training.run", "cuset_core.models"),  # down: fine
        ("cuset_core.verify.execution.judge", "cuset_core.verify.sandbox"),  # inside one part: fine
    ]
    assert upward_arrows(edges) == edges[:2]
    inside_verify = [
        ("cuset_core.verify.source.static", "cuset_core.verify.execution.judge"),  # tier 0 up into the judge
        ("cuset_core.verify.execution.judge", "cuset_core.verify.sandbox"),  # down: fine
    ]
    assert upward_arrows(inside_verify, "cuset_core.verify", VERIFY_FLOORS) == inside_verify[:1]


def test_the_sandbox_package_stands_on_the_floor_of_the_sandbox_module():
    """``verify/sandbox`` is a package of modules by role; each is the part ``sandbox``, on the
    floor the one module had (its ``policy`` is not verify's ``policy``)."""
    modules = [m for m in _modules() if _inside(m, "cuset_core.verify.sandbox")]
    assert len(modules) > 1 and {_part(m, "cuset_core.verify") for m in modules} == {"sandbox"}
    edges = [
        ("cuset_core.verify.sandbox.policy", "cuset_core.verify.source.static"),  # across its floor
        ("cuset_core.verify.sandbox.policy", "cuset_core.verify.settings"),  # down: fine
        ("cuset_core.verify.sandbox.policy", "cuset_core.verify.policy"),  # down: fine
        ("cuset_core.verify.sandbox.process", "cuset_core.verify.sandbox.policy"),  # inside one part: fine
        ("cuset_core.verify.execution.judge", "cuset_core.verify.sandbox.process"),  # down: fine
    ]
    assert upward_arrows(edges, "cuset_core.verify", VERIFY_FLOORS) == edges[:1]


def test_the_layer_check_sees_imports_deferred_into_functions():
    """A function-level import is an edge of the layer graph but not of the import-time one."""
    deferred = set(import_graph(deferred=True).edges)
    at_import = set(import_graph().edges)
    assert ("api.cli", "api.embedded") in deferred - at_import


def _cycles() -> list[frozenset[str]]:
    return [frozenset(c) for c in nx.strongly_connected_components(import_graph(deferred=True)) if len(c) > 1]


def test_the_project_has_no_import_cycles_but_the_known_ones():
    unknown = [sorted(cycle) for cycle in _cycles() if cycle not in KNOWN_CYCLES]
    assert not unknown, unknown


def test_a_cycle_through_an_import_deferred_into_a_function_counts(tmp_path):
    """``from b import f`` inside a function of ``a``, and ``b`` importing ``a``: a cycle."""
    (tmp_path / "a.py").write_text("def use():\n    from b import f\n    return f\n")
    (tmp_path / "b.py").write_text("import a\n\ndef f():\n    return a\n")
    modules = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    assert _imports("a", modules["a"], modules, deferred=True) == {"b"}
    assert _imports("b", modules["b"], modules, deferred=True) == {"a"}


def test_every_known_cycle_still_exists():
    """A cycle that was broken leaves the list, so the list stays the truth."""
    cycles = set(_cycles())
    assert not set(KNOWN_CYCLES) - cycles, sorted(sorted(c) for c in set(KNOWN_CYCLES) - cycles)


def test_the_api_loads_without_torch():
    """An API process validates, stores and dispatches; only workers load models (DESIGN.md §2),
    so importing the app must not pay for torch (seconds and hundreds of MB per process)."""
    import subprocess
    import sys

    probe = "import sys, api.main; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
