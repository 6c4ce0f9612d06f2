"""Properties of the code itself: no import cycles."""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGES = {"headcut": ROOT / "headcut", "headcut_grader": ROOT / "grader" / "headcut_grader"}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = (package, *path.relative_to(folder).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(path: Path, known) -> set[str]:
    """Modules of `known` that `path` imports anywhere (top level or inside a function); `from pkg import
    sub` counts as importing pkg.sub alone when every name is a submodule."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
            out.update(subs if len(subs) == len(node.names) else [node.module, *subs])
    return out & set(known)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on.discard(group[-1])
            if len(group) > 1:
                groups.append(sorted(group))

    for v in edges:
        if v not in index:
            visit(v)
    return groups


def test_cycles_finds_a_circle_of_three():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_back_through_others():
    known = modules()
    edges = {name: imported(path, known) - {name} for name, path in known.items()}
    assert cycles(edges) == []
