"""Control characters in the text a job carries into files, environment variables and messages.

A NUL, an ESC sequence or another C0/C1 control (or DEL) in a name, path, URI, label or
annotation value has no use in a job and can rewrite a terminal or forge a log line where the
value is printed, so every such field refuses them: fields with a pattern of their own refuse
them by that pattern; free text takes one of the two patterns here (the CRD's schema has the
same). Multi-line text (annotation and env values) keeps tab and newline.
"""

from __future__ import annotations

import re
from typing import Any

# C0 controls, DEL and C1 controls: written as escapes so that the CRD's RE2 and Python's re
# read the same class.
_CONTROLS = r"\x00-\x1f\x7f-\x9f"
_MULTILINE_CONTROLS = r"\x00-\x08\x0b-\x1f\x7f-\x9f"  # all but tab and newline
LINE_PATTERN = rf"^[^{_CONTROLS}]*$"
TEXT_PATTERN = rf"^[^{_MULTILINE_CONTROLS}]*$"
_ANY_CONTROL = re.compile(f"[{_CONTROLS}]")
_TEXT_CONTROL = re.compile(f"[{_MULTILINE_CONTROLS}]")


def escaped(text: str) -> str:
    """`text` with every control character written as an escape (`\\x1b`), for messages."""
    return _ANY_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def control_problem(text: str, multiline: bool = False) -> str | None:
    """Why `text` cannot be a job's value (its first control character, escaped, and where),
    or None. `multiline` keeps tab and newline."""
    found = (_TEXT_CONTROL if multiline else _ANY_CONTROL).search(text)
    if found is None:
        return None
    return (
        f"holds a control character ({escaped(found.group())} at position {found.start()}); "
        "names, paths, URIs and values must be printable text"
    )


def data_control_problem(value: Any, max_depth: int) -> str | None:
    """The first control character in the keys and strings of JSON data (a volume source),
    said with where it is, or None; keys are one line, strings may be multi-line. Iterative
    and bounded by `max_depth`, as sections.json_data_problem checks the rest."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        at = f" at {where}" if where else ""
        if isinstance(item, str):
            problem = control_problem(item, multiline=True)
            if problem:
                return f"the text{at} {problem}"
        elif isinstance(item, list) and depth < max_depth:
            stack.extend((sub, f"{where}[{i}]", depth + 1) for i, sub in enumerate(item))
        elif isinstance(item, dict) and depth < max_depth:
            for key, sub in item.items():
                problem = control_problem(key) if isinstance(key, str) else None
                if problem:
                    return f"a key{at} {problem}"
                stack.append((sub, f"{where}.{key}" if where else str(key), depth + 1))
    return None
