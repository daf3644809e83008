"""The package's imports point one way: no circle, and no foundation imports a stage (or the CLI).

Every import counts, those inside functions too (the CLI and the stages import lazily to stay cheap)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "workflow" / "forgetmap"
# what stages build on: they may import each other, never a stage or the CLI
FOUNDATIONS = {"errors", "io", "matrix", "models", "pretrained", "from_gguf", "devices", "plots", "embed", "stats",
               "nll", "generation", "engine", "memory", "sharded", "meta_peak", "gradients",
               "anatomy", "kept", "fractional"}
ENTRY = {"cli", "__main__"}  # nothing but `python -m forgetmap` imports the CLI


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(name: str, path: Path, known: dict) -> set[str]:
    """The package's modules that `name` imports (a package counts as its __init__)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.startswith("forgetmap"):
                target = node.module.removeprefix("forgetmap").lstrip(".")
            else:
                continue
            for alias in node.names:  # `from . import plots` imports a module; `from .x import f` imports x
                child = f"{target}.{alias.name}" if target else alias.name
                found.add(child if child in known else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("forgetmap."):
                    found.add(alias.name.removeprefix("forgetmap."))
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def top(name: str) -> str:
    return name.split(".")[0]


def test_the_import_graph_has_no_circle():
    edges = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for child in sorted(edges[node]):
            if state.get(child) == 1:
                cycle = stack[stack.index(child):] + [child]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if child not in state:
                visit(child)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)


def test_foundations_import_no_stage_and_nothing_imports_the_cli():
    for name, targets in graph().items():
        for target in targets:
            assert top(target) not in ENTRY or top(name) in ENTRY, f"{name} imports the CLI ({target})"
            if top(name) in FOUNDATIONS or top(name) == "data":
                assert top(target) in FOUNDATIONS | {"data"}, f"foundation {name} imports the stage {target}"


def test_the_rooms_import_one_way_and_the_cost_package_stands_apart_from_the_config_and_the_plan():
    """Each package and module a room: no two rooms import each other, however far round (an arrow back up); the
    cost package imports neither the config nor the plan, and the config, which validates, imports nothing of cost
    (validating a config never probes the machine)."""
    rooms: dict[str, set[str]] = {}
    for name, targets in graph().items():
        rooms.setdefault(top(name), set()).update(top(t) for t in targets if top(t) != top(name))
    state: dict[str, int] = {}

    def visit(room, path):
        state[room] = 1
        for child in sorted(rooms.get(room, ())):
            assert state.get(child) != 1, "rooms in a circle: " + " -> ".join([*path, room, child])
            if child not in state:
                visit(child, [*path, room])
        state[room] = 2

    for room in sorted(rooms):
        if room not in state:
            visit(room, [])
    assert not rooms["cost"] & {"config", "plan"}, rooms["cost"]
    assert "cost" not in rooms["config"], rooms["config"]
