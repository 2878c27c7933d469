"""The operator's layers (docs/design.md §11) are its subpackages: every module lives in one,
and imports only from its own layer or the ones below. The trainer never imports the operator.
Both import the API package (kubegan_api), which imports neither, and only they define the
API's classes there."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "api" / "kubegan_api"
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


# A class of the same name that is not the API's: the trainer's Phase is one step of a GAN's
# training schedule (phases.py), not a job's phase.
NOT_THE_API = {("trainer/kubegan_trainer/phases.py", "Phase")}


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
        if (str(p.relative_to(ROOT)), name) not in NOT_THE_API
    )
    assert redefined == []
