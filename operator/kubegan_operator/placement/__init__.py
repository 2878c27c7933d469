"""Pure placement: nodes + spec -> plan -> rendered objects; `kubegan run`'s local plan. Imports
api and foundation.

Layer order and rules: docs/design.md §11, tests/unit/test_layers.py."""
