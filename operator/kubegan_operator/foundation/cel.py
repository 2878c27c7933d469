"""CEL text written from Python values, so that a CRD rule names the very values the pydantic
validator beside it reads (an enum member, a table's entries) and the two cannot drift."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def literal(value: Any) -> str:
    """A CEL literal: strings (enum members too) single-quoted, booleans, numbers."""
    if isinstance(value, str):
        if "'" in value or "\\" in value:
            raise ValueError(f"cannot quote {value!r} for CEL")
        return f"'{value}'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    raise ValueError(f"no CEL literal for a {type(value).__name__}")


def raw_string(text: str) -> str:
    """A CEL raw string literal (regex backslashes kept as they are)."""
    if "'" in text:
        raise ValueError(f"cannot quote {text!r} for CEL")
    return f"r'{text}'"


def one_of(field: str, values: Iterable[Any]) -> str:
    """True when `field` is one of `values` (`==` for a single one)."""
    values = list(values)
    if len(values) == 1:
        return f"{field} == {literal(values[0])}"
    return f"{field} in [{', '.join(literal(v) for v in values)}]"


def none_of(field: str, values: Iterable[Any]) -> str:
    """True when `field` is none of `values` (`!=` for a single one)."""
    values = list(values)
    if len(values) == 1:
        return f"{field} != {literal(values[0])}"
    return f"!({one_of(field, values)})"
