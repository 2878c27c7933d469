"""Pure manifests: a job and its plan -> the Service, ConfigMap, worker Pods and PodGroup to
create. Imports placement and below.

Layer order and rules: docs/design.md §11, tests/unit/test_layers.py."""
