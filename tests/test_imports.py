"""Imports point down and never go round in a circle.

Every .py file of the packages below is parsed with `ast` (nothing is imported), and each
import becomes an edge of the module graph: absolute and relative imports, `from x import
y` where y is a submodule (an edge to x.y), and imports inside functions or under
`if TYPE_CHECKING:` too, since a cycle there is still a cycle in the design. An edge goes
to the module itself, not to its parent packages' __init__.

The layers (DESIGN.md): common/ < storage/, metadata_log/ < kraft/, broker/; broker/
never imports kraft/, and kraft/tools/ (the command line) is the only part of kraft/ that
imports broker/; spark_jobs/ talks Kafka's protocol and imports no server code.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What each part of the code may import of ours, besides itself. The most specific row
# (longest prefix) applies to a module.
LAYER_RULES: dict[str, frozenset[str]] = {
    "common": frozenset(),
    "storage": frozenset({"common"}),
    "metadata_log": frozenset({"common"}),
    "broker": frozenset({"common", "storage", "metadata_log"}),
    "kraft": frozenset({"common", "storage", "metadata_log"}),
    # The command-line tools talk to brokers and controllers both: the only part of
    # kraft/ that may import broker/.
    "kraft.tools": frozenset({"common", "storage", "metadata_log", "broker"}),
    "spark_jobs": frozenset({"common", "storage", "metadata_log"}),
}

# Checked for cycles only: benchmarks and tests may import any layer.
CYCLES_ONLY = ("bench", "tests")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(packages: Iterable[str]) -> dict[str, Path]:
    return {
        module_name(p): p
        for pkg in packages
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def known(name: str, modules: set[str]) -> str | None:
    """The longest prefix of `name` that is one of our modules (None: not ours)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in modules:
            return candidate
    return None


def imports_of(module: str, path: Path, modules: set[str]) -> set[str]:
    """Our modules that `module` imports anywhere in its file."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from x import y`: y is a submodule (an edge to x.y) or a name in x.
            subs = [f"{base}.{a.name}" if base else a.name for a in node.names]
            targets = [sub if sub in modules else base for sub in subs]
        else:
            continue
        # A name that is no .py module of ours is someone else's, or a C extension of
        # ours (spark_jobs._record_walk): it imports nothing back.
        out.update(t for t in targets if t in modules and t != module)
    return out


def import_graph(packages: Iterable[str]) -> dict[str, set[str]]:
    files = source_files(packages)
    modules = set(files)
    return {m: imports_of(m, p, modules) for m, p in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def one_cycle(graph: dict[str, set[str]], component: frozenset[str]) -> list[str]:
    """A shortest circle through the component's first module, to print."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in {sorted(component)}")


def rule_for(module: str) -> tuple[str, frozenset[str]] | None:
    row = known(module, set(LAYER_RULES))
    return None if row is None else (row, LAYER_RULES[row])


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        rule = rule_for(module)
        if rule is None:
            continue
        row, allowed = rule
        own = module.split(".")[0]
        for t in sorted(targets):
            top = t.split(".")[0]
            if top != own and top not in allowed:
                out.append(f"{module} imports {t} ({row}/ may import only "
                           f"{sorted(allowed) or 'nothing of ours'})")
    return out


def test_no_import_cycles() -> None:
    graph = import_graph([*{r.split(".")[0] for r in LAYER_RULES}, *CYCLES_ONLY])
    lines = [f"import cycle: {' -> '.join(one_cycle(graph, c))} (modules: {sorted(c)})"
             for c in sorted(cycles(graph), key=sorted)]
    assert not lines, "\n".join(lines)


def test_imports_point_down() -> None:
    graph = import_graph({r.split(".")[0] for r in LAYER_RULES})
    violations = layer_violations(graph)
    assert not violations, "\n".join(violations)


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The walker itself: relative, submodule, function-level and TYPE_CHECKING imports."""
    pkg = ROOT / "spark_jobs"
    modules = set(source_files(["spark_jobs"]))
    source = pkg / "source.py"
    assert "spark_jobs.stream" in imports_of("spark_jobs.source", source, modules)  # in a method
    fake = tmp_path / "fake.py"
    fake.write_text(
        "from typing import TYPE_CHECKING\n"
        "from spark_jobs import planner\n"
        "if TYPE_CHECKING:\n    from spark_jobs.options import TP\n"
    )
    assert imports_of("spark_jobs.fake", fake, modules) == {
        "spark_jobs.planner", "spark_jobs.options"}
    relative = tmp_path / "rel.py"
    relative.write_text("from . import planner\nfrom .options import TP\nfrom .. import broker\n")
    assert imports_of("spark_jobs.rel", relative, modules | {"broker"}) == {
        "spark_jobs.planner", "spark_jobs.options", "broker"}
