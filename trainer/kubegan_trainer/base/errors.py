"""The one exception type that means "the user must fix something".

The entrypoint prints it as a single line on stderr and exits non-zero, instead of a
traceback: a missing data file or a broken checkpoint is not a bug in the trainer. Its exit
code, and the others the trainer and `kubegan run` end with, are the contract's
(kubegan_api.contract: EXIT_USER_ERROR and the rest).
"""

from __future__ import annotations


class TrainerError(Exception):
    """A problem with the job's input (config, data, checkpoints), reported as one line."""
