"""The package's import graph has no circle, counting the imports made inside functions (a lazy import
hides a circle at import time, not from a reader following the code)."""

from __future__ import annotations

import ast

from conftest import REPO

SRC = REPO / "src"


def _modules() -> dict[str, tuple[str, ast.Module]]:
    """{dotted module name: (its package, parsed source)} for every module of xcbench."""
    out = {}
    for p in sorted((SRC / "xcbench").rglob("*.py")):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        out[name] = (name if p.name == "__init__.py" else name.rsplit(".", 1)[0], ast.parse(p.read_text()))
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the xcbench modules it imports anywhere in its text (`from pkg import mod` names mod)."""
    mods = _modules()

    def known(name: str) -> str:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, (package, tree) in mods.items():
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                edges |= {known(a.name) for a in node.names if a.name.startswith("xcbench")}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                if base.startswith("xcbench"):
                    edges |= {known(f"{base}.{a.name}") for a in node.names}
        graph[name] = {e for e in edges if e and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_planted_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_import_graph_reads_lazy_and_relative_imports():
    g = import_graph()
    assert "xcbench.sparse.ffi_triton" in g["xcbench.sparse.uniform"]  # imported inside a function
    assert "xcbench.registry" in g["xcbench.config"]  # the library check, imported where it is used


def test_no_import_circle():
    found = cycles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)
