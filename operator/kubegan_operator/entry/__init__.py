"""The `kubegan` command and the operator's start (kopf).

Layer order and rules: docs/design.md §11, tests/unit/test_layers.py."""
