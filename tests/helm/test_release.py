"""The release workflow: actionlint passes on .github/workflows, and the chart's
default image references are exactly what .github/workflows/release.yml pushes, all from one
version source, the chart's appVersion; the base image is pinned by digest, the images carry
SBOM and provenance attestations, and images and chart are signed keyless, by digest."""

from __future__ import annotations

import re
import subprocess

import yaml
from kubegan_operator import __version__

from tests.helm.chart import CHART, ROOT, one, template, tool_bin

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _build_step_run() -> str:
    steps = _workflow()["jobs"]["release"]["steps"]
    runs = [s["run"] for s in steps if "make images" in s.get("run", "")]
    assert len(runs) == 1, "the workflow builds its images with `make images` once"
    return runs[0]


def _image_targets() -> list[str]:
    """The targets `make images` builds: build-images.sh's ALL_TARGETS."""
    script = (ROOT / "hack" / "build-images.sh").read_text()
    found = re.search(r"^ALL_TARGETS=\(([^)]*)\)", script, re.M)
    assert found, "ALL_TARGETS not found in hack/build-images.sh"
    return found.group(1).split()


def test_actionlint_passes_on_the_workflows() -> None:
    result = subprocess.run(
        [tool_bin("actionlint"), "-color=false"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_finds_a_broken_workflow(tmp_path) -> None:
    """The lint is live: an undefined step output is reported."""
    broken = WORKFLOW.read_text().replace("steps.version.outputs.version", "steps.nope.outputs.x")
    path = tmp_path / "release.yml"
    path.write_text(broken)
    result = subprocess.run(
        [tool_bin("actionlint"), "-color=false", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "nope" in result.stdout


def test_chart_default_images_are_what_the_release_pushes() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = chart["appVersion"]
    env = _workflow()["env"]
    run = _build_step_run()
    # The workflow pushes <REGISTRY>/<target>:<appVersion> for every target make images builds.
    assert 'KUBEGAN_IMAGE_REPO="$REGISTRY"' in run and 'KUBEGAN_IMAGE_TAG="$VERSION"' in run
    assert "KUBEGAN_IMAGE_PUSH=1" in run and "KUBEGAN_IMAGE_PLATFORM=linux/amd64" in run
    pushed = {f"{env['REGISTRY']}/{t}:{version}" for t in _image_targets()}

    deployment = one(template(), "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    trainer_env = {e["name"]: e["value"] for e in container["env"] if "TRAINER_IMAGE" in e["name"]}
    rendered = {container["image"], *trainer_env.values()}
    assert rendered == pushed
    # The chart is pushed where docs/install.md installs it from, at the same version.
    assert env["CHART_REPO"] == "oci://ghcr.io/kubegan/charts"
    assert chart["version"] == version
    assert (
        "oci://ghcr.io/kubegan/charts/kubegan --version" in (ROOT / "docs/install.md").read_text()
    )
    # The operator's own fallback (outside the chart) names the same version.
    assert __version__ == version


def test_workflow_takes_its_version_from_the_chart() -> None:
    steps = _workflow()["jobs"]["release"]["steps"]
    version_step = next(s for s in steps if s.get("id") == "version")
    assert (
        "appVersion" in version_step["run"] and "charts/kubegan/Chart.yaml" in version_step["run"]
    )
    assert _workflow()[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads `on` as true


def _steps(job: str) -> list[dict]:
    return _workflow()["jobs"][job]["steps"]


def test_release_builds_on_the_base_images_digest() -> None:
    """The base's tag is resolved to its digest at release time and that digest is what the
    build (and so its provenance) names."""
    base = next(s for s in _steps("release") if s.get("id") == "base")
    assert "imagetools inspect" in base["run"] and "$PYTHON_IMAGE@$digest" in base["run"]
    assert "sha256:[0-9a-f]{64}" in base["run"]  # no digest, no release
    build = next(s for s in _steps("release") if "make images" in s.get("run", ""))
    assert build["env"]["BASE_IMAGE"] == "${{ steps.base.outputs.image }}"
    assert 'KUBEGAN_PYTHON_IMAGE="$BASE_IMAGE"' in build["run"]
    # build-images.sh hands it to the Dockerfile's FROM as the PYTHON_IMAGE build argument.
    script = (ROOT / "hack" / "build-images.sh").read_text()
    assert 'BASE_ARGS=(--opt build-arg:PYTHON_IMAGE="$PYTHON_IMAGE")' in script


def test_release_attaches_sbom_and_provenance() -> None:
    run = _build_step_run()
    assert "KUBEGAN_IMAGE_ATTEST=1" in run and "KUBEGAN_IMAGE_DIGESTS=" in run
    # buildctl's spelling of `docker buildx build --sbom=true --provenance=mode=max`.
    script = (ROOT / "hack" / "build-images.sh").read_text()
    assert (
        "ATTEST_ARGS=(--opt attest:sbom= --opt attest:provenance=mode=max)" in script
        and '"${ATTEST_ARGS[@]}"' in script
    )


def test_only_the_signing_job_gets_an_oidc_token() -> None:
    workflow = _workflow()
    assert workflow["permissions"] == {}  # nothing unless a job asks
    jobs = workflow["jobs"]
    assert jobs["release"]["permissions"] == {"contents": "read", "packages": "write"}
    assert jobs["sign"]["permissions"] == {"packages": "write", "id-token": "write"}
    assert jobs["sign"]["needs"] == "release"
    assert [name for name, job in jobs.items() if "id-token" in job.get("permissions", {})] == [
        "sign"
    ]


def test_images_and_chart_are_signed_keyless_by_digest() -> None:
    steps = _steps("sign")
    (installer,) = [s for s in steps if "cosign-installer" in s.get("uses", "")]
    # Pinned by commit, not by a tag that could be moved.
    assert re.fullmatch(r"sigstore/cosign-installer@[0-9a-f]{40}", installer["uses"])
    run = next(s["run"] for s in steps if "cosign sign" in s.get("run", ""))
    assert 'cosign sign --yes "$ref"' in run and "*@sha256:*" in run
    assert "--certificate-oidc-issuer https://token.actions.githubusercontent.com" in run
    assert "--key" not in run  # keyless: no long-lived key to leak
    env = next(s["env"] for s in steps if "cosign sign" in s.get("run", ""))
    assert env == {
        "IMAGES": "${{ needs.release.outputs.images }}",
        "CHART": "${{ needs.release.outputs.chart }}",
    }
    outputs = _workflow()["jobs"]["release"]["outputs"]
    assert outputs["images"] == "${{ steps.images.outputs.refs }}"
    assert outputs["chart"] == "${{ steps.chart.outputs.ref }}"
    chart = next(s for s in _steps("release") if s.get("id") == "chart")
    assert "helm push" in chart["run"] and "/kubegan@$digest" in chart["run"]


def test_install_doc_says_how_to_verify() -> None:
    doc = (ROOT / "docs" / "install.md").read_text()
    assert "cosign verify" in doc and "--certificate-identity-regexp" in doc
    assert "--certificate-oidc-issuer https://token.actions.githubusercontent.com" in doc
    assert "imagetools inspect" in doc and "{{json .SBOM}}" in doc


def test_every_action_is_pinned_by_commit() -> None:
    for name, job in _workflow()["jobs"].items():
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), (name, step)
