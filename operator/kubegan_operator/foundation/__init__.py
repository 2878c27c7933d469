"""Leaf facts and parsers: node topology, pod verdicts, progress, cost, time, CEL, the work queue
and leader lease. Imports no other layer.

Layer order and rules: docs/design.md §11, tests/unit/test_layers.py."""
