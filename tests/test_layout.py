"""The tree's layering (docs/ARCHITECTURE.md, "Rules"): every import, module-level or inside a
function, points down the layer table or within its own package, and no module imports itself back
through others."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LAYERS = (
    ("planner.presets", 0),
    ("hardware_profiles", 0),
    ("planner.inputs", 1),
    ("cost_models", 2),
    ("planner.profiles", 3),
    ("planner.frameworks", 3),
    ("planner.search", 4),
    ("planner.plans", 5),
    ("planner.launch", 6),
    ("planner.calibration", 7),
    ("planner.outputs", 8),
    ("planner.resilience", 9),
    ("planner.api", 10),
    ("planner.cli", 11),
)
"""Each package and its layer, bottom up: a module may import its own package and packages of a
lower layer; two packages of one layer (profiles, frameworks) do not import each other."""

ROOT_MODULES = {"__init__.py", "api.py"}
"""The only modules at ``planner/``'s root: the version and the library surface."""


def _modules() -> dict[str, Path]:
    out = {}
    for top in ("planner", "cost_models", "hardware_profiles"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Our modules ``name`` imports; ``from package import submodule`` counts as the submodule."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in modules]
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(module)
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(module: str) -> tuple[int, str]:
    if module == "planner":
        return -1, "planner"
    for package, layer in LAYERS:
        if module == package or module.startswith(package + "."):
            return layer, package
    raise AssertionError(f"{module} is in no layer of LAYERS: add its package to the table and the docs")


def test_no_module_imports_a_higher_layer():
    wrong = []
    for module, targets in sorted(_graph().items()):
        mine = _layer(module)
        for target in sorted(targets):
            theirs = _layer(target)
            if theirs[0] > mine[0] or (theirs[0] == mine[0] and theirs[1] != mine[1]):
                wrong.append(f"{module} ({mine[1]}) imports {target} ({theirs[1]})")
    assert not wrong, "\n".join(wrong)


def test_no_import_circles():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, circles


def test_the_planner_root_holds_only_the_version_and_the_api():
    assert {p.name for p in (ROOT / "planner").glob("*.py")} == ROOT_MODULES


def test_the_layer_checker_sees_an_upward_import(tmp_path):
    """The checker is not vacuous: a lazy import of the CLI from a cost model is caught."""
    modules = {"cost_models.x": tmp_path / "x.py", "planner.cli.app": tmp_path / "app.py"}
    (tmp_path / "x.py").write_text("def f():\n    from planner.cli.app import main\n")
    assert _imports("cost_models.x", modules["cost_models.x"], modules) == {"planner.cli.app"}
    assert _layer("planner.cli.app")[0] > _layer("cost_models.x")[0]
