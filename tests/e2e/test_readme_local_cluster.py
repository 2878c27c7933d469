"""The README's local-cluster block, run as written on a fresh copy of the repository: the
control plane, two real nodes, fake V100 nodes, the operator with its default flags beside the
real nodes' CoreDNS, a job, a spot reclaim counted as a preemption, and `make cluster-down`.

The only difference from a contributor's shell is the environment: the block runs as real-node
site `docs` on ports from the port helper, so that it cannot collide with a `make cluster-up`
cluster of the contributor's (site `real`) or the e2e tier's own (site `e2e`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.control_plane import control_plane_ports

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## A local cluster, the operator, and a job"
SITE = "docs"


def readme_block(heading: str) -> str:
    """The first ```bash block after `heading` in README.md."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(heading) :]
    match = re.search(r"^```bash\n(.*?)^```$", section, re.M | re.S)
    assert match, f"README.md: no bash block after {heading!r}"
    return match.group(1)


def fresh_copy(dest: Path) -> Path:
    """The working tree as a clone would have it: tracked and not-ignored files only, with
    the project's .venv beside it (the block uses .venv/bin/kubegan; `make demo` made it)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if not src.is_file():
            continue  # deleted in the working tree, not yet committed
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    return dest


def test_readme_local_cluster_block_runs_as_written() -> None:
    assert os.geteuid() == 0, "the block starts real nodes: root"
    block = readme_block(HEADING)
    assert "make cluster-up" in block and "kubegan operator" in block
    # A short path, not tmp_path: the kubelets' unix sockets under <clone>/.cluster/real-nodes/
    # must stay within 107 bytes (hack/real-node-up.sh refuses longer ones).
    clone = fresh_copy(Path(tempfile.mkdtemp(prefix="kg-docs-")))
    env = {**os.environ, "KUBEGAN_REAL_SITE": SITE, **control_plane_ports()}
    env.pop("KUBECONFIG", None)
    try:
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
        operator_log = clone / ".cluster" / "logs" / "operator.log"
        assert proc.returncode == 0, (
            f"the README block failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n"
            f"{proc.stderr[-4000:]}\n"
            + (operator_log.read_text()[-3000:] if operator_log.exists() else "")
        )
        # What the block's commands printed is what the README says they print.
        assert re.search(r"^gan3d-v100\s+Running\s+Scheduled\s+4\s+8xGPU\s", proc.stdout, re.M), (
            proc.stdout
        )
        assert "condition met" in proc.stdout
        assert not (clone / ".cluster").exists(), "make cluster-down left .cluster/"
    finally:
        subprocess.run(
            ["make", "cluster-down"],
            cwd=clone,
            env=env,
            capture_output=True,
            timeout=600,
            check=False,
        )
        if not (clone / ".cluster").exists():  # else left for a look at what stayed behind
            shutil.rmtree(clone, ignore_errors=True)
