"""The package's import graph (issue 26 item 2): every import statement counts, lazy ones inside
functions and ``TYPE_CHECKING`` ones included, since each says that one module needs another.

The graph holds no cycle (``GuardedDatabase.open`` makes its worker-process subclass through a class
attribute that subclass sets, so ``agent._database`` never imports ``agent.isolation``), the library
never imports the CLI's modules, and imports point one way down the layers of ``LAYERS``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "guarded_sqlite"
KNOWN_CYCLES: list[set[str]] = []
CLI = {"guarded_sqlite.cli", "guarded_sqlite.__main__"}
"""The command line's modules (``cli`` is a package: its modules count as it)."""

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "_version", "_extras", "_core"),
    ("_engines",),
    ("_analysis",),
    ("findings", "rescue", "report", "sinks", "policy"),
    ("_rules",),
    ("_guard",),
    ("_io",),
    ("_api",),
    ("pytest_plugin", "evaluation"),
    ("agent",),
    ("cli", "__main__"),
    ("",),
)
"""The package's layers, lowest first: a module imports (lazily or not) only from its own layer or the
ones below. Each name is a subpackage (all its modules) or a top-level module; ``""`` is the package
itself (``guarded_sqlite/__init__.py``, the public face)."""

SQLGLOT_USERS = {"_analysis"}
"""The one layer that imports sqlglot: the rules ask it their questions of a statement, and the layers
every statement runs through (``_core``, ``_guard``, ``_io``) stay stdlib-only."""


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from . import x`` imports ``x``, not the package)."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    targets.append(full if full in known else source)
            elif isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            graph[name] |= {target for target in targets if target in known and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_no_import_cycle_but_the_known_one() -> None:
    assert sorted(map(sorted, cycles(import_graph()))) == sorted(map(sorted, KNOWN_CYCLES))


def in_cli(name: str) -> bool:
    return any(name == cli or name.startswith(f"{cli}.") for cli in CLI)


def test_the_library_never_imports_the_cli() -> None:
    graph = import_graph()
    for name, imported in graph.items():
        if not in_cli(name):
            assert not {target for target in imported if in_cli(target)}, name


def layer_node(module: str) -> str:
    """The entry of ``LAYERS`` a module belongs to: its subpackage, or its own name at the top level."""
    return module.removeprefix("guarded_sqlite").lstrip(".").partition(".")[0]


def test_every_module_has_a_layer() -> None:
    placed = {node for layer in LAYERS for node in layer}
    assert {layer_node(name) for name in modules()} - placed == set()


def test_imports_point_down_the_layers() -> None:
    rank = {node: level for level, layer in enumerate(LAYERS) for node in layer}
    upward = [
        f"{name} -> {target}"
        for name, imported in import_graph().items()
        for target in imported
        if rank[layer_node(target)] > rank[layer_node(name)]
    ]
    assert upward == []


def test_only_the_analysis_imports_sqlglot() -> None:
    importers = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                found = [node.module or ""]
            else:
                continue
            if any(module.partition(".")[0] == "sqlglot" for module in found):
                importers.add(layer_node(name))
    assert importers == SQLGLOT_USERS


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert cycles(graph) == [{"a", "b", "c"}]
    assert cycles({"x": {"y"}, "y": set()}) == []


def test_no_module_imports_another_modules_private_names() -> None:
    private: list[str] = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("guarded_sqlite")):
                private += [
                    f"{name}: from {'.' * node.level}{node.module or ''} import {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    assert private == []


def test_no_module_is_longer_than_650_lines() -> None:
    # A module a newcomer can read at one sitting; past this, split it along its seams.
    long = {name: lines for name, path in modules().items() if (lines := len(path.read_text().splitlines())) > 650}
    assert long == {}
