"""What ships in the images (api/, operator/, trainer/, examples/models/: the Dockerfile) holds no
test hooks: fault injection and test observation live in tests/ (tests/trainer/hooked.py)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("api", "operator", "trainer", "examples/models")


def test_the_shipped_code_reads_no_test_variables() -> None:
    readers = [
        str(path.relative_to(REPO))
        for top in SHIPPED
        for path in sorted((REPO / top).rglob("*.py"))
        if "KUBEGAN_TEST_" in path.read_text(encoding="utf-8")
    ]
    assert not readers, readers
    assert not (REPO / "trainer" / "kubegan_trainer" / "testhooks.py").exists()
