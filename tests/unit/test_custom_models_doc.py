"""docs/custom-models.md shows the example package exactly as it ships in examples/models/:
every block marked `<!-- shipped: PATH -->` is that file, and every file of the guide's
model has its block."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "custom-models.md"
BLOCK = re.compile(r"<!-- shipped: (\S+) -->\n```[a-z]*\n(.*?)```\n", re.DOTALL)
GUIDE_FILES = {
    "examples/models/kubegan_examples/tiny_gan.py",
    "examples/models/kubegan_examples/tiny_gan_keras.py",
    "examples/models/tiny-gan.yaml",
    "examples/models/pyproject.toml",
    "examples/models/Dockerfile",
}


def test_every_shipped_block_is_its_file() -> None:
    blocks = BLOCK.findall(GUIDE.read_text(encoding="utf-8"))
    assert {path for path, _ in blocks} == GUIDE_FILES
    for path, code in blocks:
        assert code == (ROOT / path).read_text(encoding="utf-8"), f"{path} differs from the guide"


def test_the_guides_model_is_about_fifty_lines() -> None:
    model = (ROOT / "examples/models/kubegan_examples/tiny_gan.py").read_text(encoding="utf-8")
    assert len(model.splitlines()) <= 70


def test_the_dockerfile_adds_only_the_package_to_the_trainer_image() -> None:
    lines = (ROOT / "examples/models/Dockerfile").read_text(encoding="utf-8").splitlines()
    steps = [ln.split()[0] for ln in lines if ln and not ln.startswith((" ", "#"))]
    assert steps == ["ARG", "FROM", "USER", "RUN", "USER"]
    assert any("pip install --no-cache-dir /tmp/model" in ln for ln in lines)
    # One new layer: the package comes in by a bind mount and pip leaves in the same step.
    assert any(ln.startswith("RUN --mount=type=bind,source=.,target=/tmp/model,rw") for ln in lines)
    assert any("pip uninstall --yes pip" in ln for ln in lines)
    assert "FROM ${TRAINER_IMAGE}" in lines and any("trainer-torch" in ln for ln in lines)
