"""The one exception type that means "the user must fix something".

The entrypoint prints it as a single line on stderr and exits non-zero, instead of a
traceback: a missing data file or a broken checkpoint is not a bug in the trainer.
"""

from __future__ import annotations

# Exit codes shared by the trainer and the local runner.
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 143  # 128 + SIGTERM: stopped early with a checkpoint, resumable


class TrainerError(Exception):
    """A problem with the job's input (config, data, checkpoints), reported as one line."""
