"""`make push` (hack/push.sh) into a real registry on this machine: the CNCF distribution
registry (hack/build-binaries.sh) with TLS and htpasswd authentication on 127.0.0.1. The
images are a tiny OCI layout of the shape `make images` writes (this tier runs before the
images exist); the chart is the real one. The pushed images keep the layout's digests, under
the tag the chart's defaults name; the chart installs from oci:// with helm; a layer already
in the registry's storage (hard-linked there from the layout) is not sent again."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubegan_api.contract import ENV_TRAINER_IMAGE_TORCH

from tests.helm.chart import CHART, ROOT, helm_bin, tool_bin
from tests.support import oci_layout
from tests.support.oci_layout import MANIFEST
from tests.support.registry import LocalRegistry, local_registry

TARGETS = ["operator", "trainer-torch", "trainer-tf", "trainer-tf-tpu"]
CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())
APP_VERSION = str(CHART_META["appVersion"])
CHART_VERSION = str(CHART_META["version"])


def layout_name(target: str) -> str:
    return f"kubegan.local/{target}:dev"


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A KUBEGAN_IMAGE_CACHE whose oci/ holds the four targets, a few hundred bytes each."""
    cache = tmp_path_factory.mktemp("images")
    oci_layout.tiny_layout(cache / "oci", [layout_name(t) for t in TARGETS])
    return cache


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    with local_registry(tool_bin("registry"), tmp_path_factory.mktemp("registry")) as reg:
        yield reg


def push(
    reg: LocalRegistry, images: Path, *targets: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "hack" / "push.sh"), *targets],
        env={**os.environ, **reg.push_env(), "KUBEGAN_IMAGE_CACHE": str(images), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def pushed(registry: LocalRegistry, images: Path) -> subprocess.CompletedProcess[str]:
    # trainer-torch's layer is in the registry's storage before the push, as the e2e tier
    # seeds the gigabyte layers: the push must find it and send only config and manifest.
    registry.seed_layers(images / "oci", layout_name("trainer-torch"), "kubegan/trainer-torch")
    done = push(registry, images)
    assert done.returncode == 0, done.stderr
    return done


def test_the_registry_wants_its_credentials(registry: LocalRegistry) -> None:
    assert registry.get("/v2/", password=None)[0] == 401
    assert registry.get("/v2/", password="not-the-password")[0] == 401
    assert registry.get("/v2/")[0] == 200


def test_every_image_is_pushed_with_the_layouts_digest_under_the_charts_tag(
    registry: LocalRegistry, images: Path, pushed: subprocess.CompletedProcess[str]
) -> None:
    for target in TARGETS:
        path = f"/v2/kubegan/{target}/manifests/{APP_VERSION}"
        status, headers = registry.get(path, accept=MANIFEST)
        assert status == 200, (target, status)
        want = oci_layout.descriptor(images / "oci", layout_name(target))["digest"]
        assert headers["Docker-Content-Digest"] == want
        assert registry.get(path, password=None, accept=MANIFEST)[0] == 401
    assert f"oci://{registry.prefix}/charts/kubegan:{CHART_VERSION}" in pushed.stderr


def test_a_layer_the_registry_has_is_not_sent_again(
    registry: LocalRegistry, images: Path, pushed: subprocess.CompletedProcess[str]
) -> None:
    layout = images / "oci"
    (layer,) = oci_layout.layer_digests(layout, layout_name("trainer-torch"))
    config = oci_layout.manifest(layout, layout_name("trainer-torch"))["config"]["digest"]
    (op_layer,) = oci_layout.layer_digests(layout, layout_name("operator"))
    # An upload ends with PUT .../blobs/uploads/<id>?...&digest=sha256%3A<hex>.
    sent = " ".join(
        r.uri for r in registry.requests() if r.method == "PUT" and "/uploads/" in r.uri
    )
    hexes = {d: d.removeprefix("sha256:") for d in (layer, config, op_layer)}
    assert hexes[config] in sent, "the config is sent"
    assert hexes[op_layer] in sent, "a layer the registry lacks is sent"
    assert hexes[layer] not in sent, "the seeded layer is not"
    asked = [r for r in registry.requests() if r.uri == f"/v2/kubegan/trainer-torch/blobs/{layer}"]
    assert [(r.method, r.status) for r in asked] == [("HEAD", "200")]
    stored = registry.storage / "docker/registry/v2/blobs/sha256" / hexes[layer][:2] / hexes[layer]
    assert (stored / "data").samefile(oci_layout.blob_path(layout, layer)), "on disk once"


def helm_oci(
    reg: LocalRegistry, command: str, *args: str, login: bool = True
) -> subprocess.CompletedProcess[str]:
    """helm <command> of the pushed chart, trusting the registry's CA; logged in by push.sh's
    `helm registry login`, or (login=False) with no credentials at all."""
    env = {**os.environ, **reg.push_env()}
    if not login:  # helm also reads docker's credentials, and caches what it pulled
        nobody = reg.dir / "nobody"
        env |= {
            "HELM_REGISTRY_CONFIG": str(nobody / "config.json"),
            "DOCKER_CONFIG": str(nobody),
            "HELM_CACHE_HOME": str(nobody / "cache"),
        }
    chart = f"oci://{reg.prefix}/charts/kubegan"
    return subprocess.run(
        [
            helm_bin(),
            *command.split(),
            chart,
            "--version",
            CHART_VERSION,
            "--ca-file",
            str(reg.ca),
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_chart_installs_from_the_registry(
    registry: LocalRegistry, pushed: subprocess.CompletedProcess[str]
) -> None:
    """`helm template` of the oci:// chart (install's download path) with the image
    repository pointed at the registry: the operator and trainer images are the pushed ones."""
    rendered = helm_oci(
        registry, "template kubegan", "--set", f"image.repository={registry.prefix}/operator"
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"{registry.prefix}/operator:{APP_VERSION}"
    env_vars = {e["name"]: e.get("value") for e in container["env"]}
    want = f"{registry.prefix}/trainer-torch:{APP_VERSION}"
    assert env_vars[ENV_TRAINER_IMAGE_TORCH] == want
    refused = helm_oci(registry, "show chart", login=False)
    assert refused.returncode != 0 and "basic credential not found" in refused.stderr


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"REGISTRY": ""}, "REGISTRY is not set"),
        ({"REGISTRY": "https://example.com"}, "without a scheme"),
        ({"KUBEGAN_REGISTRY_PASSWORD": "wrong"}, "helm registry login"),
        ({"KUBEGAN_IMAGE_TAG": "nope"}, "is not in"),
    ],
)
def test_what_cannot_be_pushed_is_one_line(
    registry: LocalRegistry, images: Path, env: dict[str, str], says: str
) -> None:
    done = push(registry, images, "operator", **env)
    assert done.returncode != 0
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("[push] ERROR")]
    assert len(errors) == 1 and says in errors[0], done.stderr
    assert "Traceback" not in done.stderr
