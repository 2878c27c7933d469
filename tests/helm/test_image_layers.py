"""The images' layer order and the TPU image's lock: a code change rebuilds (and a node
re-pulls) only the small last layer; the dependency layers come from the locked lists alone."""

from __future__ import annotations

import re

from tests.helm.chart import ROOT
from tests.helm.test_dockerfile import stages

TARGETS = {
    "operator": "deps-operator",
    "trainer-torch": "deps-torch",
    "trainer-tf": "deps-tf",
    "trainer-tf-tpu": "deps-tf-tpu",
}


def test_dependencies_first_code_last() -> None:
    st = stages()
    for target, deps in TARGETS.items():
        copies = [i for i in st[target] if i.startswith("COPY ")]
        assert copies == [
            f"COPY --from={deps} /opt/venv /opt/venv",
            "COPY --from=package /pkg/opt/venv /opt/venv",
        ], target
        # A dependency stage sees one locked list, never the source tree: editing code or
        # pyproject.toml leaves its layer cached.
        deps_copies = [i for i in st[deps] if i.startswith("COPY ")]
        assert len(deps_copies) == 1 and deps_copies[0].startswith("COPY --from=requirements /req/")


def test_tpu_image_installs_the_tpu_lock() -> None:
    st = stages()
    assert "COPY --from=requirements /req/tpu.txt /req/requirements.txt" in st["deps-tf-tpu"]
    pins = (ROOT / "requirements" / "tpu.txt").read_text()
    names = set(re.findall(r"^([A-Za-z0-9_.-]+)==", pins, re.M))
    assert {"tensorflow-tpu", "libtpu"} <= names
    # tensorflow-tpu ships the `tensorflow` package itself: plain TensorFlow would overwrite it.
    assert "tensorflow" not in names
    assert not any(n.startswith("nvidia-") for n in names)  # no CUDA wheels on TPU hosts
    lock = (ROOT / "hack" / "lock.sh").read_text()
    assert '[tpu]="tpu"' in lock
