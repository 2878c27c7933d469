"""Property tests over the input readers and the planner (a short run; the long fuzz run is
tests/fuzz/fuzz_inputs.py, see docs/fuzzing.md)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings

from tests.unit.hostile import check_files, check_planner, cli_cases, planner_cases

SHORT = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SHORT
@given(cli_cases())
def test_cli_never_tracebacks_and_plan_json_is_json(case: tuple[str, dict[str, Any]]) -> None:
    check_files(*case)


@SHORT
@given(planner_cases)
def test_planner_never_offers_negative_or_duplicate_capacity(case: tuple[Any, Any, Any]) -> None:
    check_planner(*case)
