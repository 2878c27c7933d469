"""CEL text written from Python values, so that a CRD rule names the very values the pydantic
validator beside it reads (an enum member, a table's entries) and the two cannot drift; and
`Rule`, one check on an object written both ways."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic_core import PydanticCustomError


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


@dataclass(frozen=True)
class Rule:
    """A rule on one object: `cel` with self = that object, `holds` the same in Python."""

    field_path: str  # CEL's fieldPath relative to the object ("" for the object itself)
    message: str
    cel: str
    holds: Callable[[Any], bool]


def cel_rules(*rules: Rule) -> dict[str, Any]:
    """The model_config entry that puts `rules` on the object's schema in the CRD."""
    return {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {"rule": r.cel, "message": r.message}
                | ({"fieldPath": r.field_path} if r.field_path else {})
                for r in rules
            ]
        }
    }


def check(obj: Any, rules: Iterable[Rule]) -> None:
    """Raise every broken rule as the spec's cross-field errors are (loading._describe)."""
    broken = [(r.field_path, r.message) for r in rules if not r.holds(obj)]
    if broken:
        raise PydanticCustomError("cross_field", "{rules}", {"rules": broken})
