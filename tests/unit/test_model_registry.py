"""The models a framework trains are listed once, in the API (`MODELS_BY_FRAMEWORK`, which
validation and the CRD's CEL read); each backend's registry must hold exactly those. Read
from the source, so the unit tier needs neither torch nor tensorflow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from kubegan_api.sections import MODELS_BY_FRAMEWORK, Framework, ModelName

BACKENDS = Path(__file__).resolve().parents[2] / "trainer" / "kubegan_trainer" / "backends"


def registry_keys(path: Path) -> set[ModelName]:
    """The `ModelName.x` keys of the module's `MODELS = {...}`."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "MODELS" for t in targets):
                assert isinstance(node.value, ast.Dict), "MODELS is a dict literal"
                keys = set()
                for key in node.value.keys:
                    assert isinstance(key, ast.Attribute), "keyed by ModelName members"
                    keys.add(ModelName[key.attr])
                return keys
    raise AssertionError(f"{path}: no MODELS registry")


@pytest.mark.parametrize(
    ("framework", "backend"), [(Framework.pytorch, "torch"), (Framework.tensorflow, "tf")]
)
def test_each_backends_registry_holds_the_models_the_api_lists(
    framework: Framework, backend: str
) -> None:
    keys = registry_keys(BACKENDS / backend / "models" / "__init__.py")
    assert keys == MODELS_BY_FRAMEWORK[framework]
