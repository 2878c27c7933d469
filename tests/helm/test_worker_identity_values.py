"""The chart's workers.identities: a ServiceAccount per namespace for the workers
of jobs naming none, with the annotations workload identity needs and no token mount; the
operator's flags, read back by the operator's own parser; bad names refused by the schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_operator.decide.snapshot import WorkerIdentity
from kubegan_operator.entry.cli import build_parser
from kubegan_operator.entry.main import worker_identities

from tests.helm.chart import CHART, by_kind, helm, template

AKS_CLIENT = "azure.workload.identity/client-id"
AKS_USE = "azure.workload.identity/use"
VALUES = {
    "workers": {
        "identities": {
            "ml": {
                "serviceAccountName": "gan-trainer",
                "annotations": {AKS_CLIENT: "7f0c9e1a-5b2d-4c3e-9a8b-6d1e2f3a4b5c"},
                "podLabels": {AKS_USE: "true"},
            },
            "team-b": {"serviceAccountName": "made-by-hand", "create": False},
        }
    }
}


def render(tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return template("-f", str(path))


def operator_args(docs: list[dict[str, Any]]) -> list[str]:
    (deploy,) = by_kind(docs, "Deployment")
    return list(deploy["spec"]["template"]["spec"]["containers"][0]["args"])


def test_no_identity_unless_set() -> None:
    docs = template()
    assert not [a for a in operator_args(docs) if a.startswith("--worker-identity")]
    assert [sa["metadata"]["name"] for sa in by_kind(docs, "ServiceAccount")] == [
        "kubegan-operator"
    ]


def test_each_namespace_gets_its_account_and_the_operator_its_flags(tmp_path: Path) -> None:
    docs = render(tmp_path, VALUES)
    made = {
        (sa["metadata"]["namespace"], sa["metadata"]["name"]): sa
        for sa in by_kind(docs, "ServiceAccount")
    }
    assert ("team-b", "made-by-hand") not in made  # create: false: the team's own
    sa = made[("ml", "gan-trainer")]
    assert sa["metadata"]["annotations"] == {AKS_CLIENT: "7f0c9e1a-5b2d-4c3e-9a8b-6d1e2f3a4b5c"}
    assert sa["automountServiceAccountToken"] is False
    args = build_parser().parse_args(operator_args(docs))
    assert worker_identities(args.worker_identity, args.worker_identity_label) == {
        "ml": WorkerIdentity("gan-trainer", {AKS_USE: "true"}),
        "team-b": WorkerIdentity("made-by-hand", {}),
    }


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("workers.identities.ml.serviceAccountName=Bad_Name", "Bad_Name"),
        ("workers.identities.ml.podLabels.k=not a value", "not a value"),
        ("workers.identities.ml.create=true", "serviceAccountName"),
        ("workers.identities.ml.serviceAccount=x", "serviceAccount"),
    ],
)
def test_a_bad_identity_is_refused_by_the_schema(setting: str, named: str) -> None:
    result = helm("template", "kubegan", str(CHART), "--set-string", setting, check=False)
    assert result.returncode != 0
    assert named in result.stderr, result.stderr
