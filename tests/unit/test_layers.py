"""The operator's layers (docs/design.md §11) and the trainer's (docs/architecture.md) are
their subpackages: every module lives in one, and imports only from its own layer or the
ones below; neither the trainer nor the API package has an import cycle. The trainer never
imports the operator. Both import the API package (kubegan_api), which imports neither, and
only they define the API's classes there."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "api" / "kubegan_api"
OPERATOR = ROOT / "operator" / "kubegan_operator"
TRAINER = ROOT / "trainer" / "kubegan_trainer"

# Bottom to top; kept equal to docs/design.md §11.
LAYERS = ["foundation", "api", "placement", "manifests", "decide", "runtime", "entry"]


def operator_imports(path: Path) -> set[str]:
    """The layers (subpackages) a module imports from; the package root counts as none."""
    deps: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                raise AssertionError(
                    f"{path}: relative import; the layer table reads absolute ones"
                )
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "kubegan_operator" and len(parts) > 1 and parts[1] in LAYERS:
                deps.add(parts[1])
    return deps


def layer(path: Path) -> str:
    return path.relative_to(OPERATOR).parts[0]


def test_every_operator_module_lives_in_one_layer() -> None:
    loose = [p.name for p in OPERATOR.glob("*.py") if p.name != "__init__.py"]
    assert loose == [], "modules outside a layer subpackage"
    packages = {p.name for p in OPERATOR.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYERS), {
        "not in the table": sorted(packages - set(LAYERS)),
        "no such package": sorted(set(LAYERS) - packages),
    }
    nested = [str(p) for p in OPERATOR.glob("*/*/*.py")]
    assert nested == [], "layers are one level deep"


def test_no_import_points_up_a_layer() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    modules = sorted(OPERATOR.glob("*/*.py"))
    assert len(modules) > 20
    upward = [
        f"{p.relative_to(OPERATOR)} ({layer(p)}) imports {dep}"
        for p in modules
        for dep in sorted(operator_imports(p))
        if rank[dep] > rank[layer(p)]
    ]
    assert upward == []


def test_the_trainer_never_imports_the_operator() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in TRAINER.rglob("*.py")
        if operator_imports(p) or "import kubegan_operator" in p.read_text()
    ]
    assert offenders == []


# What the API package may import besides the standard library and itself.
API_DEPENDENCIES = {"pydantic", "pydantic_core"}


def top_level_imports(path: Path) -> set[str]:
    """The top-level packages a module imports, wherever in it the import is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    return found


def test_the_api_imports_only_pydantic_and_the_standard_library() -> None:
    modules = sorted(API.glob("*.py"))
    assert len(modules) > 5
    allowed = set(sys.stdlib_module_names) | API_DEPENDENCIES | {"kubegan_api", "__future__"}
    foreign = {
        str(p.relative_to(ROOT)): sorted(top_level_imports(p) - allowed)
        for p in modules
        if top_level_imports(p) - allowed
    }
    # Never the operator, the trainer, a framework or a Kubernetes client.
    assert foreign == {}


def _classes(path: Path) -> set[str]:
    return {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)}


def test_the_api_is_defined_only_in_the_api_package() -> None:
    api_classes = set().union(*(_classes(p) for p in API.glob("*.py")))
    # The ones most tempting to define again beside their users.
    assert {"ConditionType", "Reason", "Phase", "GANTrainingJobSpec", "TrainerConfig"} <= (
        api_classes
    )
    redefined = sorted(
        (str(p.relative_to(ROOT)), name)
        for root in (OPERATOR, TRAINER)
        for p in root.rglob("*.py")
        for name in _classes(p) & api_classes
    )
    assert redefined == []


def test_conditions_reasons_and_phases_are_named_only_by_their_enums() -> None:
    """A literal "Unschedulable" beside the enum drifts from it unseen: operator and trainer
    say ConditionType.x, Reason.x, Phase.x, PodPhase.x."""
    from kubegan_api.conditions import ConditionType, Reason
    from kubegan_api.status import Phase, PodPhase

    values = {member.value for enum in (ConditionType, Reason, Phase, PodPhase) for member in enum}
    literals = sorted(
        f"{p.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
        for root in (OPERATOR, TRAINER)
        for p in root.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Constant) and node.value in values
    )
    assert literals == []


# The trainer, bottom to top (docs/architecture.md); `__main__` (the container's command)
# sits above them all and nothing imports it.
TRAINER_LAYERS = ["base", "storage", "data", "worker", "backends", "launch"]
TRAINER_TOP = "__main__"


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """Every import in a file, wherever in it (a lazy import counts): (module, the names taken
    from it); `import a.b` is ("a.b", [])."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                raise AssertionError(f"{path}: relative import; the tables read absolute ones")
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
    return found


def _imported_names(path: Path) -> list[str]:
    """For `from a.b import c`, both `a.b` and `a.b.c` (c may be a module)."""
    return [
        n for module, names in _imports(path) for n in [module, *(f"{module}.{c}" for c in names)]
    ]


def trainer_layer(path: Path) -> str:
    first = path.relative_to(TRAINER).parts[0]
    return TRAINER_TOP if first == f"{TRAINER_TOP}.py" else first


def test_every_trainer_module_lives_in_one_layer() -> None:
    loose = sorted(p.name for p in TRAINER.glob("*.py"))
    assert loose == ["__init__.py", f"{TRAINER_TOP}.py"], "modules outside a layer subpackage"
    packages = {p.name for p in TRAINER.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(TRAINER_LAYERS), {
        "not in the table": sorted(packages - set(TRAINER_LAYERS)),
        "no such package": sorted(set(TRAINER_LAYERS) - packages),
    }
    assert (TRAINER / "__init__.py").read_text().strip() == "", "the package root imports nothing"


def test_no_trainer_import_points_up_a_layer() -> None:
    rank = {name: i for i, name in enumerate([*TRAINER_LAYERS, TRAINER_TOP])}
    modules = sorted(TRAINER.rglob("*.py"))
    assert len(modules) > 50
    upward = sorted(
        {
            f"{p.relative_to(TRAINER)} ({trainer_layer(p)}) imports {parts[1]}"
            for p in modules
            for name in _imported_names(p)
            if (parts := name.split("."))[0] == "kubegan_trainer" and len(parts) > 1
            if rank[parts[1]] > rank[trainer_layer(p)]
        }
    )
    assert upward == []


def _module_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, each name resolved to its file (a name
    that is not a module, `from a.b import SomeClass`, is a.b)."""
    package = package_dir.name
    modules: dict[str, Path] = {}
    for p in package_dir.rglob("*.py"):
        parts = p.relative_to(package_dir.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = p
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for module, names in _imports(path):
            if module.split(".")[0] != package:
                continue
            # `from a.b import c` imports module a.b.c where there is one, else (a class) a.b.
            targets = [f"{module}.{c}" for c in names if f"{module}.{c}" in modules]
            if len(targets) < len(names) or not names:
                targets.append(module)
            deps.update(t for t in targets if t != name)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_neither_the_trainer_nor_the_api_has_an_import_cycle() -> None:
    for package_dir in (TRAINER, API):
        graph = _module_graph(package_dir)
        assert len(graph) > 10
        assert _cycles(graph) == [], package_dir.name
