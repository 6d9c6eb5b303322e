"""The package's layout keeps its promises: no import cycles among lab/'s modules, and the product (lab.softmax's
path: lab/__init__.py, lab/ops.py, lab/dispatch.py) imports nothing of the harness. Read from the sources'
import statements, those inside functions included."""

import ast
from pathlib import Path

from lab.env import ROOT

LAB = ROOT / "lab"
PRODUCT = {"lab", "lab.ops", "lab.dispatch", "lab.losses"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def lab_imports(path: Path, modules: set[str]) -> set[str]:
    """The lab modules a source imports anywhere in it (`from lab import x` imports lab.x where that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "lab":
            subs = {f"{node.module}.{a.name}" for a in node.names} & modules
            found |= subs or ({node.module} & modules)
    return found - {module_name(path)}


def graph() -> dict[str, set[str]]:
    paths = sorted(LAB.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): lab_imports(p, modules) for p in paths}


def test_no_import_cycles_in_lab():
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(nxt):], nxt]))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])


def test_the_product_imports_nothing_of_the_harness():
    edges = graph()
    for module in PRODUCT:
        assert edges[module] <= PRODUCT, f"{module} imports {sorted(edges[module] - PRODUCT)}"


def test_the_layout_reader_sees_imports_inside_functions():
    """The graph is only as good as its reader: the command line imports lab.resources inside the functions that
    compile, and the product imports lab.ops at its top."""
    edges = graph()
    assert "lab.resources" in edges["lab.test"] and "lab.ops" in edges["lab"]
