"""The lock: .venv holds exactly what uv.lock pins, the images' lists are exported from it, and
the tools that install them are the pinned ones."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def uv() -> str:
    """The pinned uv (hack/install-uv.sh installs it when missing and prints its path)."""
    out = subprocess.run(
        ["bash", str(ROOT / "hack" / "install-uv.sh")],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def venv_extras() -> list[str]:
    """The extras `make install` puts into .venv (the Makefile's VENV_EXTRAS)."""
    line = re.search(r"^VENV_EXTRAS := (.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert line, "Makefile: no VENV_EXTRAS"
    return re.findall(r"--extra (\S+)", line.group(1))


def locked_for_this_machine(extras: list[str]) -> dict[str, str]:
    """name -> version that uv.lock pins for `extras` on this interpreter and platform."""
    args = [f"--extra={e}" for e in extras]
    out = subprocess.run(
        [uv(), "export", "--frozen", "--no-hashes", "--no-header", "--no-emit-project", *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    pinned = {}
    for line in out.splitlines():
        if not line or line.startswith((" ", "#")):
            continue
        requirement, _, marker = line.partition(";")
        name, _, version = requirement.strip().partition("==")
        if not marker.strip() or Marker(marker.strip()).evaluate():
            pinned[canonicalize_name(name)] = version
    return pinned


def test_venv_equals_the_lock() -> None:
    """`uv pip list` of .venv is the lock, nothing more or less."""
    listed = subprocess.run(
        [uv(), "pip", "list", "--python", sys.executable, "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {
        canonicalize_name(p["name"]): p["version"]
        for p in json.loads(listed)
        if canonicalize_name(p["name"]) != "kubegan"  # the project itself, editable
    }
    locked = locked_for_this_machine(venv_extras())
    assert set(installed) == set(locked), {
        "installed, not locked": sorted(set(installed) - set(locked)),
        "locked, not installed": sorted(set(locked) - set(installed)),
    }
    differ = {n: (installed[n], locked[n]) for n in locked if installed[n] != locked[n]}
    assert differ == {}


def test_lock_and_image_lists_are_up_to_date() -> None:
    """uv.lock matches pyproject.toml and requirements/*.txt are what it exports."""
    check = subprocess.run(
        ["bash", str(ROOT / "hack" / "lock.sh"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "UV": uv()},
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_image_lists_are_fully_pinned_with_hashes() -> None:
    for path in sorted((ROOT / "requirements").glob("*.txt")):
        entries = [
            ln for ln in path.read_text().splitlines() if ln and not ln.startswith((" ", "#"))
        ]
        assert entries, path
        for entry in entries:
            assert re.match(r"^[A-Za-z0-9_.\-\[\],]+==\S+( ;.*)? \\$", entry), (path.name, entry)


def test_one_uv_version_for_make_and_the_images() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    required = pyproject["tool"]["uv"]["required-version"]
    dockerfile = re.search(r"^ARG UV_VERSION=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert dockerfile and required == f"=={dockerfile.group(1)}"


def test_build_backend_is_pinned() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for requirement in pyproject["build-system"]["requires"]:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9.]+", requirement), requirement


def test_uv_itself_is_installed_by_hash() -> None:
    """hack/install-uv.sh (make's uv) takes uv from requirements/uv.txt, by hash, at the
    version pyproject.toml requires, as the Dockerfile's uv stage does."""
    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"][
        "required-version"
    ]
    pins = (ROOT / "requirements" / "uv.txt").read_text()
    assert pins.startswith(f"uv{required} \\\n")
    assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}", pins)) >= 2  # a wheel per platform
    script = (ROOT / "hack" / "install-uv.sh").read_text()
    assert '--require-hashes --no-deps -r "$pins"' in script
    assert 'pins="$REPO_ROOT/requirements/uv.txt"' in script
    assert re.search(r'"uv==\$version"', script) is None  # never by name alone
    assert subprocess.run([uv(), "--version"], capture_output=True, text=True).stdout.startswith(
        f"uv {required.removeprefix('==')}"
    )
