"""The shape of allotment's import graph: no cycles, nothing importing upward.

The layers, lowest first: the database (``allotment.db``), the domain
(``allotment.ledger``, ``allotment.candidates``), the HTTP plumbing
(``allotment.http``), the handlers, and the application around them (``wsgi``,
``server`` and its ``waitress_adapter``, ``cli``, authentication, metrics'
exposition). The graph is read
from the source with ``ast``, without importing anything: every ``import`` in a
module counts, at module level, inside functions and under ``TYPE_CHECKING``
alike, since each one ties the two modules together all the same.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

PACKAGE = "allotment"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

_APPLICATION = ("allotment.http", "allotment.handlers", "allotment.wsgi", "allotment.auth",
                "allotment.metrics", "allotment.server", "allotment.waitress_adapter",
                "allotment.cli", "allotment.openapi",
                # How refusals are answered and worded: the domain carries the facts only.
                "allotment.refusals")

# (lower, upper): no module of ``lower`` may import one of ``upper``, directly
# or through any chain of other modules. A name covers the module or package
# it names and everything under it.
LAYERS: list[tuple[str, str]] = [
    *[(domain, upper) for domain in ("allotment.ledger", "allotment.candidates", "allotment.db")
      for upper in _APPLICATION],
    ("allotment.db", "allotment.ledger"),
    ("allotment.db", "allotment.candidates"),
    ("allotment.http", "allotment.handlers"),
    ("allotment.http", "allotment.wsgi"),
    ("allotment.metrics", "allotment.auth"),
    ("allotment.metrics", "allotment.handlers"),
    ("allotment.metrics", "allotment.wsgi"),
    # The request plumbing needs the identity's type, not the authentication.
    ("allotment.http", "allotment.auth"),
    ("allotment.policy", "allotment.auth"),
    # The schemas and the OpenAPI document are read by handlers, never the reverse.
    *[(lower, upper) for lower in ("allotment.schemas", "allotment.openapi")
      for upper in ("allotment.handlers", "allotment.wsgi")],
    ("allotment.schemas", "allotment.openapi"),
    *[("allotment.handlers", upper)
      for upper in ("allotment.wsgi", "allotment.server", "allotment.waitress_adapter",
                    "allotment.cli")],
    # The adapter serves whatever WSGI callable it is given, for the server that
    # configures it: it knows neither the application nor gunicorn's side.
    *[("allotment.waitress_adapter", upper)
      for upper in ("allotment.server", "allotment.wsgi", "allotment.handlers",
                    "allotment.cli")],
    # Within the candidates: the state, the values and the search below the engine
    # that asks them, explain and headroom above it (they run the engine, never the
    # reverse).
    *[(lower, upper)
      for lower in ("allotment.candidates.model", "allotment.candidates.search",
                    "allotment.candidates.resolved", "allotment.candidates.request",
                    "allotment.candidates.budget", "allotment.candidates.feed")
      for upper in ("allotment.candidates.sources", "allotment.candidates.engine",
                    "allotment.candidates.explain", "allotment.candidates.headroom")],
    ("allotment.candidates.sources", "allotment.candidates.engine"),
    ("allotment.candidates.engine", "allotment.candidates.explain"),
    ("allotment.candidates.engine", "allotment.candidates.headroom"),
    ("allotment.candidates.explain", "allotment.candidates.headroom"),
    ("allotment.candidates.headroom", "allotment.candidates.explain"),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _parents(name: str) -> Iterator[str]:
    """The packages above ``name`` (importing a module runs their ``__init__`` first)."""
    parts = name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        yield ".".join(parts[:end])


def imported_by(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The package's modules that the module ``name`` (at ``path``) imports."""
    modules = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            # ``from allotment.x import y``: y is a submodule or a name in x.
            found.update(f"{base}.{alias.name}" for alias in node.names
                         if f"{base}.{alias.name}" in modules)
    targets = set()
    for target in found:
        if target in modules:
            targets.add(target)
            targets.update(parent for parent in _parents(target) if parent in modules)
    targets.discard(name)
    return targets


def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    return {name: imported_by(name, path, modules) for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one module (each one holds a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def chain_to(graph: dict[str, set[str]], start: str, is_goal: Callable[[str], bool],
             allowed: set[str] | None = None) -> list[str] | None:
    """The shortest import chain from ``start`` to a module ``is_goal`` accepts,
    through ``allowed`` modules only when given (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            # Deepest names first: the module imported, not the package it is in.
            for succ in sorted(graph.get(node, ()), key=lambda m: (-m.count("."), m)):
                if allowed is not None and succ not in allowed:
                    continue
                if is_goal(succ):
                    chain = [succ, node]
                    while chain[-1] != start:
                        chain.append(came_from[chain[-1]])
                    return chain[::-1]
                if succ not in came_from and succ != start:
                    came_from[succ] = node
                    following.append(succ)
        frontier = following
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle per strongly connected component, first module repeated last."""
    found = []
    for component in strongly_connected(graph):
        members = set(component)
        loops = [chain_to(graph, node, node.__eq__, members) for node in component]
        found.append(min((loop for loop in loops if loop), key=len))
    return found


def within(name: str, area: str) -> bool:
    return name == area or name.startswith(area + ".")


GRAPH = import_graph()


def test_the_graph_is_read() -> None:
    """The reader finds what the source plainly says (a guard against a blind test)."""
    assert len(GRAPH) > 50
    assert "allotment.handlers.root" in GRAPH["allotment.wsgi"]
    # ``from allotment.ledger import providers``: a submodule, not a name.
    assert "allotment.ledger.providers" in GRAPH["allotment.handlers.providers"]
    # A function-level import counts.
    assert "allotment.server" in GRAPH["allotment.cli"]
    assert "allotment.waitress_adapter" in GRAPH["allotment.server"]


def test_relative_and_from_imports_are_resolved(tmp_path: Path) -> None:
    """allotment has no relative imports today; the reader must not miss one tomorrow."""
    source = tmp_path / "__init__.py"
    source.write_text("from . import sibling\n"
                      "from .. import errors\n"
                      "from ..ledger.errors import Race\n"
                      "def later():\n"
                      "    from allotment.http import render, not_a_module\n")
    known = ["allotment", "allotment.errors", "allotment.http", "allotment.http.render",
             "allotment.ledger", "allotment.ledger.errors", "allotment.pkg",
             "allotment.pkg.sibling"]
    assert imported_by("allotment.pkg", source, known) == {
        "allotment", "allotment.errors", "allotment.http", "allotment.http.render",
        "allotment.ledger", "allotment.ledger.errors", "allotment.pkg.sibling"}


def test_no_import_cycles() -> None:
    found = cycles(GRAPH)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


@pytest.mark.parametrize("lower, upper", LAYERS, ids=[f"{a}<{b}" for a, b in LAYERS])
def test_nothing_imports_upward(lower: str, upper: str) -> None:
    chains = [chain_to(GRAPH, name, lambda target: within(target, upper))
              for name in sorted(GRAPH) if within(name, lower)]
    shown = [" -> ".join(chain) for chain in chains if chain]
    assert not shown, f"{lower} imports {upper}:\n" + "\n".join(shown)


def test_no_handler_imports_another() -> None:
    """What two handlers share (query parsing, rendering, bodies) lives in
    ``allotment.http``; a handler module imports only the shared base class."""
    shared = {"allotment.handlers", "allotment.handlers.base"}
    found = {name: sorted(target for target in targets
                          if within(target, "allotment.handlers") and target not in shared)
             for name, targets in GRAPH.items() if within(name, "allotment.handlers")}
    assert {name: targets for name, targets in found.items() if targets} == {}


def test_only_the_adapter_imports_waitress() -> None:
    """waitress's undocumented internals are reached in ``allotment.waitress_adapter``
    alone, where tests/test_waitress_internals.py pins each one."""
    importers = []
    for name, path in source_modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            else:
                continue
            if any(within(target, "waitress") for target in targets):
                importers.append(name)
    assert sorted(set(importers)) == ["allotment.waitress_adapter"]
