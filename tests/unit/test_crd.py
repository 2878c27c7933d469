"""The committed CRD is exactly what `kubegan crd` generates, and is a structural schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kubegan_api.rules import CROSS_FIELD_RULES
from kubegan_operator.api.crd import crd_yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "gantrainingjobs.kubegan.io.yaml"


def test_committed_crd_equals_generated() -> None:
    generated = subprocess.run(
        [sys.executable, "-m", "kubegan_operator.entry.cli", "crd"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert generated == CRD_FILE.read_text(), "run `make crd` and commit the result"


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for k, v in node.get("properties", {}).items():
            found += _walk(v, f"{path}.{k}")
        if "items" in node:
            found += _walk(node["items"], f"{path}[]")
    return found


def test_schema_is_structural() -> None:
    crd = yaml.safe_load(crd_yaml())
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node, path
        assert "title" not in node, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string"), path
        else:
            assert "type" in node, f"{path} has no type"
        assert node.get("default", 0) is not None, path


def test_crd_names_columns_and_status() -> None:
    crd = yaml.safe_load(crd_yaml())
    assert crd["metadata"]["name"] == "gantrainingjobs.kubegan.io"
    assert crd["spec"]["names"]["shortNames"] == ["ganjob", "ganjobs"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Phase",
        "Scheduling",
        "Workers",
        "Per-Worker",
        "Epoch",
        "Epoch-Time",
        "Preemptions",
        "Cost",
        "Age",
    ]
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    # Epoch of total ("3/20") and what a worker holds ("4xTPU"): strings the operator writes.
    assert columns["Epoch"]["jsonPath"] == ".status.progress.summary"
    assert columns["Per-Worker"]["jsonPath"] == ".status.placement.perWorker"
    assert columns["Preemptions"]["jsonPath"] == ".status.preemptions"


def test_enums_minimums_defaults_and_rules() -> None:
    spec = yaml.safe_load(crd_yaml())["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"
    ]["spec"]
    props = spec["properties"]
    assert props["framework"]["enum"] == ["tensorflow", "pytorch"]
    assert props["strategy"]["default"] == "auto"
    training = props["training"]["properties"]
    assert training["epochs"] == {
        "type": "integer",
        "default": 60,
        "minimum": 1,
        "maximum": 1_000_000,
    }
    assert training["gradientClipNorm"]["exclusiveMinimum"] is True
    assert props["placement"]["properties"]["spot"]["enum"] == ["allowed", "required", "never"]
    assert props["runPolicy"]["properties"]["cleanPodPolicy"]["default"] == "Running"
    assert props["model"]["properties"]["options"]["x-kubernetes-preserve-unknown-fields"]
    assert props["resources"]["properties"]["cpu"]["x-kubernetes-int-or-string"]
    rules = spec["x-kubernetes-validations"]
    assert len(rules) == len(CROSS_FIELD_RULES)
    assert all(r["fieldPath"].startswith(".") and r["message"] for r in rules)


def test_every_bound_survives_the_apiservers_float64() -> None:
    # The apiserver holds minimum/maximum as float64 and refuses the whole CRD when an
    # integer field's bound is no longer an integer after rounding (2**63-1 -> 2**63).
    crd = yaml.safe_load(crd_yaml())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    nodes = _walk(schema)
    bounded = 0
    for path, node in nodes:
        for key in ("minimum", "maximum"):
            if key not in node:
                continue
            bounded += 1
            bound = node[key]
            assert float(bound) == bound, f"{path}.{key} = {bound} is not exact in float64"
            if node.get("type") == "integer":
                assert -(2**63) <= int(float(bound)) < 2**63, f"{path}.{key} outside int64"
    assert bounded > 10
    int64_fields = [p for p, n in nodes if n.get("format") == "int64"]
    assert ".spec.runPolicy.activeDeadlineSeconds" in int64_fields
