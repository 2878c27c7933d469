"""Kubernetes resource quantities ("500m", "4", "16Gi", "1e3"): the form a job may write them
in, and their value, which the planner compares with what nodes have."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import PlainValidator, WithJsonSchema

_SUFFIXES = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|([a-zA-Z]*))$")
# The CRD's quantity pattern allows two exponent digits; the planner must compare all of them.
MAX_EXPONENT = 99

# Kubernetes resource quantities ("500m", "4", "16Gi", "1e3"): positive, with a bounded
# exponent so that every accepted value is a finite number the planner can compare.
QUANTITY_PATTERN = (
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE][+]?[0-9]{1,2}))?$"
)
QUANTITY_HINT = "a positive Kubernetes quantity such as 500m, 4 or 16Gi"


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "16Gi", 8) as a Decimal; ValueError if malformed."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"not a quantity: {value!r}")
    m = _QUANTITY.match(str(value).strip())
    if not m or (m.group(3) or "") not in _SUFFIXES:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        number = Decimal(m.group(1))
        if m.group(2):
            exponent = int(m.group(2)[1:])
            if abs(exponent) > MAX_EXPONENT:
                raise ValueError(f"not a quantity: {value!r} (exponent out of range)")
            result = number * Decimal(10) ** exponent
        else:
            result = number * _SUFFIXES[m.group(3) or ""]
    except (InvalidOperation, ArithmeticError):
        raise ValueError(f"not a quantity: {value!r}") from None
    if not result.is_finite():
        raise ValueError(f"not a quantity: {value!r}")
    return result


def _quantity(value: object) -> str:
    # Floats are refused as the apiserver's int-or-string schema refuses them.
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"must be {QUANTITY_HINT} (an integer or a string)")
    text = str(value)
    if not re.fullmatch(QUANTITY_PATTERN, text):
        raise ValueError(f"{text[:80]!r} is not {QUANTITY_HINT}")
    # The planner compares it with what nodes have: whatever passes here must parse there.
    parse_quantity(text)
    return text


Quantity = Annotated[
    str,
    PlainValidator(_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
