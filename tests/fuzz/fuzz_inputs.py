"""Fuzz `kubegan validate/plan/render` and the node, pod and price readers for a while.

    nice -n 15 .venv/bin/python -m tests.fuzz.fuzz_inputs --minutes 10

Runs the properties of tests/unit/hostile.py (no traceback, no hang, valid plan JSON, no
negative or duplicate capacity) with hypothesis until the time is up, and prints how many
inputs each property was given. Exit 1 on the first failure, with the input hypothesis
shrank it to. Not part of `make test`; tests/unit/test_properties.py is its short version.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings

from tests.unit.hostile import PROPERTIES

OUTCOMES: Counter[str] = Counter()  # "plan exit 3": how far the inputs got


def _counted(name: str, check: Any, counts: dict[str, int], slowest: dict[str, float]) -> Any:
    def body(case: Any) -> None:
        start = time.monotonic()
        result = check(case)
        if isinstance(result, tuple):
            OUTCOMES[f"{result[0]} exit {result[1]}"] += 1
        counts[name] += 1
        slowest[name] = max(slowest[name], time.monotonic() - start)

    return body


def fuzz(minutes: float, batch: int) -> int:
    deadline = time.monotonic() + minutes * 60
    counts = dict.fromkeys(PROPERTIES, 0)
    slowest = dict.fromkeys(PROPERTIES, 0.0)
    rounds = 0
    while time.monotonic() < deadline:
        for name, (strategy, check) in PROPERTIES.items():
            run = settings(
                max_examples=batch,
                deadline=None,
                database=None,
                derandomize=False,
                suppress_health_check=list(HealthCheck),
            )(given(strategy)(_counted(name, check, counts, slowest)))
            run()
            if time.monotonic() >= deadline:
                break
        rounds += 1
        total = sum(counts.values())
        print(f"{time.monotonic() - deadline + minutes * 60:7.0f}s  inputs {total}  {counts}",
              flush=True)  # fmt: skip
    slow = {k: round(v, 2) for k, v in slowest.items()}
    print(f"done: {sum(counts.values())} inputs, no traceback, no hang; by property {counts}")
    print(f"slowest input per property (s): {slow}")
    print(f"outcomes of the CLI inputs: {dict(sorted(OUTCOMES.items()))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=500, help="examples per hypothesis run")
    args = parser.parse_args(argv)
    return fuzz(args.minutes, args.batch)


if __name__ == "__main__":
    sys.exit(main())
