"""Leaf facts and parsers, no I/O: node topology, pod verdicts, the trainer's metrics, cost, time,
Kueue's words, the Lease protocol. Imports no other layer.

Layer order and rules: docs/design.md §11, tests/unit/test_layers.py."""
