"""The one exception type that means "the user must fix something".

The entrypoint prints it as a single line on stderr and exits non-zero, instead of a
traceback: a missing data file or a broken checkpoint is not a bug in the trainer. Its exit
code, and the others the trainer and `kubegan run` end with, are the contract's
(kubegan_api.contract: EXIT_USER_ERROR and the rest).
"""

from __future__ import annotations

import re

# How Python prints an object it has no words for: `<_io.BytesIO object at 0x7f...>`.
_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")


class TrainerError(Exception):
    """A problem with the job's input (config, data, checkpoints), reported as one line."""


def error_text(err: BaseException, source: str = "in-memory data") -> str:
    """A library's error in words a user can act on: its first line, with any object repr it
    printed for the file it was given (PIL's "cannot identify image file <_io.BytesIO ...>")
    replaced by `source`, what the user knows the data as."""
    text = str(err).strip()
    first = text.splitlines()[0] if text else type(err).__name__
    return _OBJECT_REPR.sub(source, first)
