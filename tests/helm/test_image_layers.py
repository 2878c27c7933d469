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
        # The target is its dependency stage with the package copied on top, last.
        assert st[target][0] == f"FROM {deps} AS {target}", target
        copies = [i for i in st[target] if i.startswith("COPY ")]
        assert copies == ["COPY --from=package /pkg/opt/venv /opt/venv"], target
        # A dependency stage sees one locked list (bind-mounted from `requirements`), never the
        # source tree: editing code or pyproject.toml leaves its layer cached.
        assert not any(i.startswith("COPY ") for i in st[deps]), deps
        (install,) = [i for i in st[deps] if i.startswith("RUN ")]
        lists = re.findall(r"--mount=type=bind,from=(\w+),source=(\S+?),", install)
        assert [(src, path.startswith("/req/")) for src, path in lists] == [
            ("requirements", True),
            ("uv", False),
        ], install


def test_tpu_image_installs_the_tpu_lock() -> None:
    st = stages()
    (install,) = [i for i in st["deps-tf-tpu"] if i.startswith("RUN ")]
    assert "--mount=type=bind,from=requirements,source=/req/tpu.txt," in install
    pins = (ROOT / "requirements" / "tpu.txt").read_text()
    names = set(re.findall(r"^([A-Za-z0-9_.-]+)==", pins, re.M))
    assert {"tensorflow-tpu", "libtpu"} <= names
    # tensorflow-tpu ships the `tensorflow` package itself: plain TensorFlow would overwrite it.
    assert "tensorflow" not in names
    assert not any(n.startswith("nvidia-") for n in names)  # no CUDA wheels on TPU hosts
    lock = (ROOT / "hack" / "lock.sh").read_text()
    assert '[tpu]="tpu"' in lock
