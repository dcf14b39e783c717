"""The package graph: no import circles in src/rollbench, and no import upward.

Imports are read from the source (every `import` and `from ... import`, also inside
functions and under `if TYPE_CHECKING:`), so a lazy import that closes a circle counts as
much as one at the top of a module, and a type-only import as much as a real one: a circle
of types is still a circle in the layering (`executors/base.py` once named `lifecycle.Run`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "rollbench"

#: lowest first; a unit may import its own modules and units of lower layers only
LAYERS: list[set[str]] = [
    {"rollbench", "errors", "timeline"},
    {"registry", "remote", "hub", "lerobot_line"},
    {"config"},
    {"plan", "benchmarks", "policies", "rendering"},
    {"results", "flags"},
    {"rollout", "progress", "report"},
    {"scheduler"},
    {"tune"},
    {"serve"},
    {"executors"},
    {"lifecycle"},
    {"cli"},
    {"__main__"},
]


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    """`rollbench.scheduler.worker` -> `scheduler`; the package itself -> `rollbench`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def imports_of(path: Path, known: set[str]) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{a.name}" for a in node.names} & known
            if len(submodules) < len(node.names):
                found.add(node.module)  # names defined in the module itself
            found.update(submodules)  # `from pkg import module` imports the module
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in known}


def graph(src: Path = SRC) -> dict[str, set[str]]:
    paths = {module_name(p, src): p for p in src.rglob("*.py")}
    known = set(paths)
    return {m: imports_of(p, known) - {m} for m, p in paths.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def layer_of(u: str) -> int:
    for i, layer in enumerate(LAYERS):
        if u in layer:
            return i
    raise AssertionError(f"rollbench.{u} is in no layer of tests/test_imports.py: put it where it belongs")


def upward(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in sorted(g.items()):
        for dep in sorted(deps):
            a, b = unit(mod), unit(dep)
            if a != b and layer_of(b) >= layer_of(a):
                bad.append(f"{mod} imports {dep} ({b} is not below {a})")
    return bad


def test_no_import_circles() -> None:
    g = graph()
    assert len(g) > 40  # the whole package was read
    assert cycles(g) == []


def test_no_upward_imports() -> None:
    assert upward(graph()) == []


def test_the_checks_see_circles_and_upward_imports(tmp_path: Path) -> None:
    """The checks fail on the knots they name (so the two tests above can fail)."""
    pkg = tmp_path / "rollbench"
    (pkg / "scheduler").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "scheduler" / "__init__.py").write_text("")
    (pkg / "plan.py").write_text("def f():\n    from rollbench.scheduler import worker  # lazy, still counts\n")
    (pkg / "scheduler" / "worker.py").write_text("import rollbench.plan\n")
    (pkg / "lifecycle.py").write_text("")
    (pkg / "scheduler" / "typed.py").write_text(  # a type-only import counts too
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rollbench import lifecycle\n"
    )
    g = graph(pkg)
    assert cycles(g) == [["rollbench.plan", "rollbench.scheduler.worker"]]
    assert upward(g) == [
        "rollbench.plan imports rollbench.scheduler.worker (scheduler is not below plan)",
        "rollbench.scheduler.typed imports rollbench.lifecycle (lifecycle is not below scheduler)",
    ]
    assert g["rollbench.scheduler.typed"] == {"rollbench.lifecycle"}


@pytest.mark.parametrize("name", ["lifecycle", "executors", "scheduler", "results"])
def test_every_unit_has_a_layer(name: str) -> None:
    assert layer_of(name) >= 0
