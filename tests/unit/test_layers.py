"""The operator's layers (docs/design.md §11): every module belongs to one, and imports only
from its own layer or the ones below. The trainer never imports the operator."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "operator" / "kubegan_operator"
TRAINER = ROOT / "trainer" / "kubegan_trainer"

# Bottom to top; kept equal to docs/design.md §11.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "foundation",
        {
            "__init__",
            "timeutil",
            "cel",
            "topology",
            "podstate",
            "progress",
            "heap",
            "workqueue",
            "leader",
            "cost",
        },
    ),
    ("api", {"api", "pricing", "loading", "crd"}),
    ("placement", {"planner", "replan", "localplan", "render"}),
    ("decide", {"snapshot", "reconcile"}),
    ("runtime", {"kube", "threads", "cache", "metrics", "observe", "apply", "controller"}),
    ("entry", {"main", "cli"}),
]


def operator_imports(path: Path) -> set[str]:
    deps: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "kubegan_operator":
                deps |= {a.name for a in node.names if not a.name.startswith("__")}
            elif node.module.startswith("kubegan_operator."):
                deps.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            deps |= {
                a.name.split(".")[1] for a in node.names if a.name.startswith("kubegan_operator.")
            }
    return deps


def layer_of() -> dict[str, int]:
    return {module: i for i, (_, modules) in enumerate(LAYERS) for module in modules}


def test_every_operator_module_has_one_layer() -> None:
    modules = {p.stem for p in OPERATOR.glob("*.py")}
    placed = [m for _, ms in LAYERS for m in ms]
    assert len(placed) == len(set(placed)), "a module is in two layers"
    assert modules == set(placed), {
        "not in a layer": sorted(modules - set(placed)),
        "no such module": sorted(set(placed) - modules),
    }


def test_no_import_points_up_a_layer() -> None:
    layers = layer_of()
    upward = [
        f"{p.stem} ({LAYERS[layers[p.stem]][0]}) imports {dep} ({LAYERS[layers[dep]][0]})"
        for p in sorted(OPERATOR.glob("*.py"))
        for dep in sorted(operator_imports(p))
        if dep in layers and layers[dep] > layers[p.stem]
    ]
    assert upward == []


def test_the_trainer_never_imports_the_operator() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in TRAINER.rglob("*.py")
        if operator_imports(p) or "import kubegan_operator" in p.read_text()
    ]
    assert offenders == []
