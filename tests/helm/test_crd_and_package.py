"""The chart ships the generated CRD unchanged, and a packaged chart still contains it."""

from __future__ import annotations

import tarfile

import yaml
from kubegan_operator.api.crd import crd_yaml

from tests.helm.chart import CHART, KUBE_VERSION, ROOT, helm

CRD_FILE = "gantrainingjobs.kubegan.io.yaml"


def test_chart_crd_equals_generated_crd() -> None:
    chart_crd = (CHART / "crds" / CRD_FILE).read_text()
    # A copy (not a symlink): `helm package` and `helm pull` keep it as a plain file.
    assert not (CHART / "crds" / CRD_FILE).is_symlink()
    assert chart_crd == (ROOT / "crds" / CRD_FILE).read_text(), (
        f"charts/kubegan/crds/ is stale: cp crds/{CRD_FILE} charts/kubegan/crds/"
    )
    assert chart_crd == crd_yaml()
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == [CRD_FILE]


def test_template_includes_the_crd_on_request() -> None:
    out = helm("template", "x", str(CHART), "--include-crds", "--kube-version", KUBE_VERSION).stdout
    crds = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "CustomResourceDefinition"]
    assert [c["metadata"]["name"] for c in crds] == ["gantrainingjobs.kubegan.io"]


def test_package_contains_crd_schema_and_presets(tmp_path) -> None:
    helm("package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("kubegan-*.tgz")
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        crd = tar.extractfile(f"kubegan/crds/{CRD_FILE}")
        assert crd is not None and crd.read().decode() == crd_yaml()
    for name in (
        "values.schema.json",
        "values-gke.yaml",
        "values-aks.yaml",
        "values-local.yaml",
        "files/dashboard.json",
        "templates/deployment.yaml",
    ):
        assert f"kubegan/{name}" in names
