"""Timestamps as Kubernetes writes them in status and conditions (RFC 3339, UTC, seconds).

A leaf module: reconcile writes these, the indexes (a node's Ready transition) and the cost
gauge read them, and none of those should import the others for two small functions.
"""

from __future__ import annotations

from datetime import UTC, datetime

_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def now_iso(now: datetime) -> str:
    return now.astimezone(UTC).strftime(_FORMAT)


def parse_time(value: str | None) -> datetime | None:
    """None for no value or one not in the form above (a hand-edited status, say)."""
    if not value:
        return None
    try:
        return datetime.strptime(value, _FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None
