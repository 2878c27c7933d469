"""Shared test helpers live in tests/support; a conftest holds fixtures for its own tier and is
never imported as a library (pytest loads conftests itself, and importing one from another tier
or from bench/ drags that tier's fixtures and import-time work along)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def test_no_conftest_is_imported_as_a_library() -> None:
    files = sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")])
    assert len(files) > 50
    offenders = [
        f"{p.relative_to(ROOT)} imports {m}"
        for p in files
        for m in sorted(imported_modules(p))
        if m.split(".")[-1] == "conftest" or m.endswith(".conftest")
    ]
    assert offenders == []


def test_conftests_hold_fixtures_and_hooks_only() -> None:
    """Anything else a conftest defines belongs in tests/support, where other tiers can use it."""
    extras = []
    for conftest in sorted((ROOT / "tests").rglob("conftest.py")):
        for node in ast.parse(conftest.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                fixture = any("fixture" in ast.unparse(d) for d in node.decorator_list)
                if not fixture and not node.name.startswith("pytest_"):
                    extras.append(f"{conftest.relative_to(ROOT)}: {node.name}")
    assert extras == []
