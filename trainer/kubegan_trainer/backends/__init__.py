"""The framework backends, one package each with the same modules: `entry` (`run(env,
config)`, what `python -m kubegan_trainer` calls), `loop` (the training loop, the epoch
driver's backend), `data` (batches of the shared data sets), `models/` (the model registry
and one module per model), `optim` and `precision`; then what only one framework has.

A backend is imported only for its framework (DESIGN §1: framework code stays inside it),
so nothing outside this package imports torch or tensorflow.
"""
