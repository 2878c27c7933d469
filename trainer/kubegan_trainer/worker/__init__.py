"""The framework-free worker runtime both backends share: the worker environment, the epoch
driver and its schedule, signals, reporting (metrics, progress, samples, quality), user
entrypoints and the training schedules of the models."""
