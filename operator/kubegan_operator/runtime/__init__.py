"""The operator's I/O: watches and their indexes, the work queue's worker (observe -> decide ->
apply), metrics, API threads.

Layer order and rules: docs/design.md §11, tests/unit/test_layers.py."""
