"""Pure decisions: a JobSnapshot in, a Decision out (reconcile). Imports manifests and below.

Layer order and rules: docs/design.md §11, tests/unit/test_layers.py."""
