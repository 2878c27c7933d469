"""The release workflow: actionlint passes on .github/workflows, and the chart's
default image references are exactly what .github/workflows/release.yml pushes, all from one
version source, the chart's appVersion."""

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
