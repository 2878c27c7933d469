"""The Lease elector's protocol (lease.py, leader.py) against an in-memory Lease API with the
apiserver's optimistic concurrency, and a clock the test moves. The real hand-over on the
local control plane is tests/cluster/test_leader_election.py."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from kubegan_operator.foundation.lease import LeaseConfig, claim
from kubegan_operator.runtime.leader import LeaseElector
from kubernetes.client.exceptions import ApiException

NOW = datetime(2026, 11, 23, 18, 0, tzinfo=UTC)


class FakeLeases:
    """read/create/replace of one Lease; replace refuses a stale resourceVersion (409)."""

    def __init__(self) -> None:
        self.spec: dict[str, Any] | None = None
        self.rv = 0
        self.writes = 0
        self.api_client = SimpleNamespace(sanitize_for_serialization=lambda spec: dict(spec))

    def read_namespaced_lease(self, name: str, namespace: str) -> Any:
        if self.spec is None:
            raise ApiException(status=404)
        return _Lease(dict(self.spec), str(self.rv))

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any]) -> None:
        if self.spec is not None:
            raise ApiException(status=409)
        self.spec, self.rv, self.writes = body["spec"], self.rv + 1, self.writes + 1

    def replace_namespaced_lease(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        if body["metadata"]["resourceVersion"] != str(self.rv):
            raise ApiException(status=409)
        self.spec, self.rv, self.writes = body["spec"], self.rv + 1, self.writes + 1


class _Lease:
    def __init__(self, spec: dict[str, Any], rv: str) -> None:
        self.spec = _Spec(spec)
        self.metadata = SimpleNamespace(resource_version=rv)


class _Spec(dict):  # a dict for sanitize, attributes like the client's V1LeaseSpec
    @property
    def holder_identity(self) -> str | None:
        return self.get("holderIdentity")

    @property
    def lease_transitions(self) -> int | None:
        return self.get("leaseTransitions")


@pytest.fixture
def world() -> tuple[FakeLeases, list[float], LeaseElector, LeaseElector]:
    api, t = FakeLeases(), [0.0]

    def elector(me: str) -> LeaseElector:
        return LeaseElector(api, LeaseConfig("kg", "ns", me), clock=lambda: t[0])

    return api, t, elector("a"), elector("b")


def test_claim_takes_only_a_free_own_or_expired_lease() -> None:
    assert claim(None, "a", False, 8, NOW)["holderIdentity"] == "a"
    held = claim(None, "b", False, 8, NOW)
    assert claim(held, "a", expired=False, duration=8, now=NOW) is None
    taken = claim(held, "a", expired=True, duration=8, now=NOW)
    assert taken["holderIdentity"] == "a" and taken["leaseTransitions"] == 1
    renewed = claim(taken, "a", expired=False, duration=8, now=NOW)
    assert renewed["acquireTime"] == taken["acquireTime"] and renewed["leaseTransitions"] == 1
    released = {**taken, "holderIdentity": ""}
    assert claim(released, "b", expired=False, duration=8, now=NOW)["holderIdentity"] == "b"


def test_one_leads_the_other_takes_over_only_after_the_lease_expired(world: Any) -> None:
    api, t, a, b = world
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    for _ in range(10):  # a renews every 2 s: b never sees it expire
        t[0] += 2
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    # a is killed: b must watch the unchanged Lease for the whole duration first
    t[0] += 7.9
    assert not b.try_acquire_or_renew()
    t[0] += 0.2
    assert b.try_acquire_or_renew()
    assert api.spec["holderIdentity"] == "b" and api.spec["leaseTransitions"] == 1
    # a comes back (a paused process, say): it sees b's Lease as fresh and stays out
    assert not a.try_acquire_or_renew()


def test_a_released_lease_is_taken_at_once(world: Any) -> None:
    api, _t, a, b = world
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.leading = True
    a.stop()  # clean shutdown: releases
    assert api.spec["holderIdentity"] == ""
    assert b.try_acquire_or_renew()


def test_two_candidates_racing_on_one_read_cannot_both_win(world: Any) -> None:
    api, t, a, b = world
    real_read = api.read_namespaced_lease
    assert a.try_acquire_or_renew()
    t[0] += 100  # a's Lease looks expired to both a and b ...
    b.try_acquire_or_renew()  # (b first sees it: starts its own observation clock)
    t[0] += 100
    stale = real_read("kg", "ns")
    api.read_namespaced_lease = lambda *_: stale  # ... and both read the same version
    assert b.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()  # a's write carries the old resourceVersion: 409
    assert api.spec["holderIdentity"] == "b"
