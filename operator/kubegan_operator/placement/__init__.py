"""Pure placement: nodes + spec -> a plan; whether a released gang can still bind; `kubegan run`'s
local plan. Imports api and foundation.

Layer order and rules: docs/design.md §11, tests/unit/test_layers.py."""
