"""The operator's I/O: watches and their indexes, expectations, free capacity, the work queue
and its workers (observe -> decide -> apply), leader election, trainer progress reads, metrics,
API threads, the collector's settings.

Layer order and rules: docs/design.md §11, tests/unit/test_layers.py."""
