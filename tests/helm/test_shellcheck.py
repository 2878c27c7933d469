"""Every shell script of the repo is ShellCheck clean (Debian's shellcheck, installed by
hack/install-debian-packages.sh; options in .shellcheckrc): the scripts that build the CI and
the clusters, the CI entry point .ci/run, and the sourced helpers through their callers. A
finding that is deliberate carries `# shellcheck disable=SCxxxx  # why` on its line."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.helm.chart import ROOT

SHEBANG = re.compile(rb"#!\s*(?:/usr)?/bin/(?:env\s+)?(?:ba|da)?sh\b")
DIRECTIVE = re.compile(r"#\s*shellcheck\s+disable=(\S+)(.*)$")


def shellcheck_bin() -> str:
    found = shutil.which("shellcheck")
    assert found, "shellcheck missing: make install (hack/install-debian-packages.sh)"
    return found


def shell_scripts() -> list[Path]:
    """Tracked and new (not ignored) files that are *.sh or start with a sh/bash shebang."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    scripts = []
    for name in sorted(set(filter(None, listed.split("\0")))):
        path = ROOT / name
        if not path.is_file() or path.is_symlink():
            continue  # deleted in the work tree, or a link to a file listed itself
        with path.open("rb") as f:
            head = f.read(64)
        if name.endswith(".sh") or SHEBANG.match(head):
            scripts.append(path)
    return scripts


def shellcheck(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shellcheck_bin(), "--format=gcc", *map(str, paths)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_every_shell_script_is_found() -> None:
    found = {p.relative_to(ROOT).as_posix() for p in shell_scripts()}
    # The CI's entry point has no suffix; the sourced helpers have no shebang.
    assert {".ci/run", "hack/go-env.sh", "hack/real-node-lib.sh", "hack/build-images.sh"} <= found
    assert not any(p.startswith(".venv/") for p in found)  # ignored files are not the repo's


def test_shellcheck_finds_nothing() -> None:
    result = shellcheck(*shell_scripts())
    assert result.returncode == 0 and not result.stdout, result.stdout + result.stderr


def test_every_disabled_check_says_why() -> None:
    for path in shell_scripts():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if found := DIRECTIVE.search(line):
                reason = found.group(2).strip()
                assert reason.startswith("#") and len(reason) > 10, (
                    f"{path.relative_to(ROOT)}:{number}: disable={found.group(1)} without a reason"
                )


def test_shellcheck_reports_a_broken_script(tmp_path) -> None:
    """The lint is live: an unquoted expansion is a finding."""
    script = tmp_path / "broken.sh"
    script.write_text("#!/usr/bin/env bash\ndir=$1\nrm -rf $dir/cache\n")
    result = shellcheck(script)
    assert result.returncode == 1 and "SC2086" in result.stdout, result.stdout + result.stderr
