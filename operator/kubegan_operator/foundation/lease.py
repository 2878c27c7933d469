"""The Lease protocol's pure parts: what a replica writes to hold a `coordination.k8s.io/v1`
Lease, and how long it may go without renewing. The elector that reads and writes the Lease is
runtime/leader.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class LeaseConfig:
    name: str
    namespace: str
    identity: str
    duration: float = 8.0
    renew_deadline: float = 6.0
    retry: float = 2.0


def micro_time(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claim(
    spec: Mapping[str, Any] | None,
    me: str,
    expired: bool,
    duration: float,
    now: datetime,
) -> dict[str, Any] | None:
    """The Lease spec to write to hold the Lease now, or None when another holder's Lease
    has not expired. `expired`: the caller has not seen the Lease change for `duration`."""
    spec = spec or {}
    holder = spec.get("holderIdentity") or ""
    mine = holder == me
    if holder and not mine and not expired:
        return None
    stamp = micro_time(now)
    transitions = int(spec.get("leaseTransitions") or 0)
    return {
        "holderIdentity": me,
        "leaseDurationSeconds": max(1, round(duration)),
        "acquireTime": spec.get("acquireTime") if mine else stamp,
        "renewTime": stamp,
        "leaseTransitions": transitions if mine or not holder else transitions + 1,
    }
