"""What the operator wrote and has not seen in its watches yet.

A watch lags behind the operator's own writes, and the level-based reconcile must not act
twice on one state (create a pod again, count a restart twice). `Expectations` is the
ReplicaSet controller's answer: after its writes the operator remembers what it expects to
see (the created pods present, deleted ones going, the written status), does not reconcile
the job until the watch shows it (or it waited too long), and counts its new workers on
their planned nodes meanwhile, so the next job's plan does not take the same GPUs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kubegan_operator.foundation.podstate import is_gated
from kubegan_operator.foundation.topology import PodUsage
from kubegan_operator.runtime.indexes import JobKey

# The watch normally shows the operator's own writes within a second; past this, stop
# waiting for it and reconcile from what it shows (a pod that was never created, say).
EXPECTATION_TIMEOUT_SECONDS = 60.0


class Seen(StrEnum):
    """What an expectation waits for the watch to show of a pod."""

    present = "present"  # created
    gone = "gone"  # deleted (or being deleted)
    ungated = "ungated"  # its gate lifted (or gone: then it is not gated either)
    # Created and released in one sync: the watch must show the pod *and* no gate.
    present_and_ungated = "present+ungated"


@dataclass
class JobExpectations:
    # pod name -> what the watch is to show of it, and until when that is waited for
    pods: dict[str, tuple[str, float]] = field(default_factory=dict)
    reserved: dict[str, PodUsage] = field(default_factory=dict)  # created, not seen yet
    written: dict[str, Any] | None = None  # the job as the status write returned it
    # "Service"/"ConfigMap"/"NetworkPolicy" created (or found there), not seen yet -> until
    # when that holds
    shared: dict[str, float] = field(default_factory=dict)
    # The resourceVersion of the job's NetworkPolicy that a patch set back, until the watch
    # shows another (a patch that changed nothing makes none: then the policy is left be).
    patched_over: str | None = None


class Expectations:
    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self.jobs: dict[JobKey, JobExpectations] = {}

    def of(self, key: JobKey) -> JobExpectations:
        return self.jobs.setdefault(key, JobExpectations())

    def expect(self, key: JobKey, pod: str, what: str) -> None:
        pods = self.of(key).pods
        if what == Seen.ungated and pods.get(pod, ("",))[0] in (
            Seen.present,
            Seen.present_and_ungated,
        ):
            # Created and released in one sync (controller): the watch must show the pod
            # too. "ungated" alone is met by a pod the watch does not show (deleted since),
            # and the job would be planned and created again before its pods appeared.
            what = Seen.present_and_ungated
        pods[pod] = (what, self.clock() + EXPECTATION_TIMEOUT_SECONDS)

    def made(self, key: JobKey, kinds: Iterable[str]) -> None:
        """The job's Service/ConfigMap/NetworkPolicy exist (created or found): until the watch
        shows them."""
        until = self.clock() + EXPECTATION_TIMEOUT_SECONDS
        for kind in kinds:
            self.of(key).shared[kind] = until

    def unseen_made(self, key: JobKey, seen: Iterable[str]) -> set[str]:
        """What `made` recorded that the watch does not show yet (`seen`), and has not waited
        for too long: a Service deleted before the watch ever showed it is created again."""
        exp = self.jobs.get(key)
        if exp is None or not exp.shared:
            return set()
        now, shown = self.clock(), set(seen)
        for kind, until in list(exp.shared.items()):
            if kind in shown or until <= now:
                del exp.shared[kind]
        return set(exp.shared)

    def patched(self, key: JobKey, version: str) -> None:
        self.of(key).patched_over = version

    def set_back(self, key: JobKey, version: str) -> bool:
        """Whether the watch still shows the policy at `version`, the one a patch set back."""
        exp = self.jobs.get(key)
        if exp is None or exp.patched_over is None:
            return False
        if exp.patched_over == version:
            return True
        exp.patched_over = None
        return False

    def reserve(self, key: JobKey, usage: PodUsage) -> None:
        self.of(key).reserved[usage.name] = usage

    def forget(self, key: JobKey) -> None:
        self.jobs.pop(key, None)

    def pending(self, key: JobKey, pods: Iterable[Mapping[str, Any]]) -> float | None:
        """Seconds until the oldest expectation of the job times out, or None when the watch
        already shows everything the operator did to its pods."""
        exp = self.jobs.get(key)
        if exp is None:
            return None
        seen = {(p.get("metadata") or {}).get("name", ""): p for p in pods}
        # A worker the watch shows holds its node through the usage index from now on; a
        # reservation left behind would count its requests forever, after it finished too
        # (seen on real nodes: three finished workers held 1.5 CPUs of a node).
        for name in [n for n in exp.reserved if n in seen]:
            del exp.reserved[name]
        if not exp.pods:
            return None
        now, left = self.clock(), None
        for name, (what, until) in list(exp.pods.items()):
            if _shown(what, seen.get(name)) or until <= now:
                del exp.pods[name]
            else:
                left = until - now if left is None else min(left, until - now)
        return left


def _shown(what: str, pod: Mapping[str, Any] | None) -> bool:
    """Whether the watch shows `what` of a pod (None: the watch does not show the pod)."""
    if what == Seen.present:
        return pod is not None
    if what == Seen.gone:
        return pod is None or bool(pod["metadata"].get("deletionTimestamp"))
    ungated = pod is not None and not is_gated(pod)  # kubegan's gate; others' are theirs
    if what == Seen.present_and_ungated:
        return ungated
    return pod is None or ungated
