"""Shared test fixtures; every test is marked with its tier (the folder under tests/)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TIERS = ("unit", "trainer", "helm", "monitoring", "cluster", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(ROOT).parts
        if len(parts) > 1 and parts[0] == "tests" and parts[1] in TIERS:
            item.add_marker(parts[1])


@pytest.fixture
def root() -> Path:
    return ROOT
