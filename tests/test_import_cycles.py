"""Imports flow one way (issue 32): no project module imports, directly or through others, a module that
imports it. An import under TYPE_CHECKING counts too: a circle in the types is still a concept with no
owner of its own. import-linter's `acyclic_siblings` contract (pyproject.toml) says the same of packages."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

PACKAGES = ("engine", "runner", "console")


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """One closed path per group of modules that import each other (Tarjan's strongly connected
    components, iterative), each starting at its smallest name, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    break
                if nxt in on_stack:
                    low[module] = min(low[module], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    group: set[str] = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        groups.append(group)
    return sorted(_closed_path(graph, group) for group in groups)


def _closed_path(graph: grimp.ImportGraph, group: set[str]) -> list[str]:
    """The shortest way round from the group's smallest module back to itself, inside the group."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in came_from:
        following = []
        for module in frontier:
            for nxt in sorted(graph.find_modules_directly_imported_by(module) & group):
                if nxt not in came_from:
                    came_from[nxt] = module
                    following.append(nxt)
        frontier = following
    path = [start]
    while (back := came_from[path[-1]]) != start:
        path.append(back)
    return [start, *reversed(path[1:])]


def describe(graph: grimp.ImportGraph, cycles: list[list[str]]) -> str:
    lines = []
    for cycle in cycles:
        lines.append("circle: " + " -> ".join([*cycle, cycle[0]]))
        for importer, imported in zip(cycle, [*cycle[1:], cycle[0]], strict=True):
            for detail in graph.get_import_details(importer=importer, imported=imported):
                lines.append(f"  {importer}:{detail['line_number']}  {detail['line_contents']}")
    return "\n".join(lines)


def test_project_modules_import_one_way() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert len(graph.modules) > 100  # the whole tree was read
    cycles = import_cycles(graph)
    assert cycles == [], "give the shared concept a module of its own:\n" + describe(graph, cycles)


def test_every_circle_is_found_and_only_circles() -> None:
    graph = grimp.ImportGraph()
    edges = [
        ("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"),  # a three-module circle
        ("p.c", "p.d"), ("p.e", "p.a"),  # lines into and out of it
        ("p.x", "p.y"), ("p.y", "p.x"),  # a second, two-module circle
        ("p.m", "p.n"), ("p.n", "p.o"), ("p.m", "p.o"),  # a diamond: no circle
    ]  # fmt: skip
    for importer, imported in edges:
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [["p.a", "p.b", "p.c"], ["p.x", "p.y"]]
    graph.remove_import(importer="p.c", imported="p.a")
    graph.remove_import(importer="p.y", imported="p.x")
    assert import_cycles(graph) == []


def test_a_circle_through_a_type_checking_import_fails_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shape of the circles issue 32 found: one side imports the other only for its types."""
    package = tmp_path / "circle32"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "shapes.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from circle32.matcher import Match\n"
    )
    (package / "matcher.py").write_text("from circle32.shapes import TYPE_CHECKING\n\nMatch = int\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("circle32", cache_dir=None)
    cycles = import_cycles(graph)
    assert cycles == [["circle32.matcher", "circle32.shapes"]]
    text = describe(graph, cycles)
    assert "circle32.shapes:4  from circle32.matcher import Match" in text
    assert "circle32.matcher:1  from circle32.shapes import TYPE_CHECKING" in text
