"""The spec (pydantic), prices, the bounded YAML loader and the CRD generated from the spec.
Imports only foundation.

Layer order and rules: docs/design.md §11, tests/unit/test_layers.py."""
