"""The operator's layers (docs/design.md §11) are its subpackages: every module lives in one,
and imports only from its own layer or the ones below. The trainer never imports the operator."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "operator" / "kubegan_operator"
TRAINER = ROOT / "trainer" / "kubegan_trainer"

# Bottom to top; kept equal to docs/design.md §11.
LAYERS = ["foundation", "api", "placement", "decide", "runtime", "entry"]


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
