"""Odd inputs the CLI and the planner meet in real files: one line, non-zero, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubegan_api.quantity import parse_quantity
from kubegan_operator.api import yaml_json
from kubegan_operator.api.input_files import InputError
from kubegan_operator.entry.cli import main
from kubegan_trainer.worker.cluster_env import visible_gpus

from tests.support.world import node

ROOT = Path(__file__).resolve().parents[2]
GAN3D = str(ROOT / "examples" / "gan3d-gke-v100-spot.yaml")


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", "0.5"), ("16Gi", str(16 * 2**30)), ("1e3", "1000"), ("8", "8"), (4, "4")],
)
def test_quantities(text: str | int, value: str) -> None:
    assert parse_quantity(text) == parse_quantity(value)


@pytest.mark.parametrize("bad", [".inf", "inf", "nan", "1e9999999", "-", "8 GPUs", True, None])
def test_quantities_that_are_not(bad: object) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(bad)


@pytest.mark.parametrize("gpu", [".inf", "1e9999999", ".nan"])
def test_plan_with_non_finite_node_capacity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gpu: str
) -> None:
    n = node("n0")
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(n).replace("nvidia.com/gpu: '8'", f"nvidia.com/gpu: {gpu}"))
    assert main(["plan", "--nodes", str(nodes), GAN3D]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("node n0: not a quantity")


def test_prices_that_are_a_directory_or_not_finite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(node("n0")))
    assert main(["plan", "--nodes", str(nodes), "--prices", str(tmp_path), GAN3D]) == 2
    assert "is a directory" in capsys.readouterr().err
    prices = tmp_path / "prices.yaml"
    prices.write_text("accelerators: {nvidia-tesla-v100: {onDemand: .nan, spot: 1}}\n")
    assert main(["plan", "--nodes", str(nodes), "--prices", str(prices), GAN3D]) == 2
    assert "is not a price in USD per hour" in capsys.readouterr().err


def test_deeply_nested_yaml(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "kubegan_operator.entry.cli", "validate", str(deep)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == f"{deep}:1:103: invalid YAML: nested deeper than 100 levels"


DEEP_DOCUMENTS = {
    # beyond libyaml's own limit (1000, in its scanner since 0.2.5 as PyYAML 6.0.4 bundles it)
    "flow, 5000 levels": ("a: " + "[" * 5000 + "]" * 5000 + "\n", "1:103"),
    # beyond the project's limit only
    "flow, 150 levels": ("a: " + "[" * 150 + "]" * 150 + "\n", "1:103"),
    "block, 300 levels": ("".join(f"{'  ' * i}k{i}:\n" for i in range(300)) + "x", "100:199"),
    "flow mappings, 2000": ("{a: " * 2000 + "1" + "}" * 2000 + "\n", "1:398"),
}


@pytest.mark.parametrize("loader", ["libyaml", "pure-python"])
@pytest.mark.parametrize("case", sorted(DEEP_DOCUMENTS))
def test_too_deep_yaml_gets_the_projects_message_from_either_loader(loader: str, case: str) -> None:
    """Whatever libyaml is installed (and without it), the message is the project's."""
    if loader == "libyaml":
        assert yaml.__with_libyaml__, "PyYAML without libyaml: the C loader is not tested"
    text, where = DEEP_DOCUMENTS[case]
    loader_class = yaml_json._LOADER if loader == "libyaml" else yaml_json._PY_LOADER
    with pytest.raises(InputError) as err:
        yaml_json.parse_yaml_documents(text, "deep.yaml", loader_class=loader_class)
    assert err.value.problems == [f"deep.yaml:{where}: invalid YAML: nested deeper than 100 levels"]


def test_run_output_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "f"
    out.write_text("")
    assert main(["run", str(ROOT / "examples" / "digits-local.yaml"), "--output", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"{out}: exists and is not a directory (--output)"


def test_local_runs_keep_the_users_visible_gpus() -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3,5"}) == ["3", "5"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert visible_gpus({}, 2) == ["0", "1"]
