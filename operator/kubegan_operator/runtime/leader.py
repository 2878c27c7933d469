"""Leader election through a `coordination.k8s.io/v1` Lease.

kopf's peering only pauses operators that see a peer of higher priority; it does not make
sure that exactly one acts, so two replicas need this. It is client-go's `leaderelection`
protocol, in small:

- Every replica polls the Lease every `retry` seconds. A Lease whose holder has not renewed
  it for `duration` seconds *as this replica observed* (its own monotonic clock, never the
  timestamps written by another machine) may be taken over; the write carries the
  resourceVersion it read, so two replicas cannot both take it.
- The leader renews every `retry` seconds. If it could not renew for `renew_deadline`
  (shorter than `duration`) it stops at once, before any other replica can have taken over:
  the process exits and Kubernetes restarts it as a follower.
- On a clean shutdown the leader stops reconciling first, then releases the Lease (empty
  holder, 1 s duration), so the next replica takes over within one poll.

With `duration` 8 s and `retry` 2 s a killed leader is replaced within about 10 s. Nothing a
leader leaves behind can make the next one act twice: pods have fixed names, and status is
written only over the resourceVersion it was computed from.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from kubegan_operator.foundation.lease import LeaseConfig, claim, micro_time

log = logging.getLogger("kubegan.leader")

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def default_identity() -> str:
    """Pod name (the hostname in Kubernetes) plus a random part: a restarted container is
    a new candidate, not the old leader coming back."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def default_namespace() -> str:
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


class LeaseElector:
    def __init__(
        self, api: Any, config: LeaseConfig, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.api = api  # client.CoordinationV1Api
        self.cfg = config
        self.clock = clock
        self.leading = False
        self._observed: tuple[Any, float] | None = None  # (spec seen, when this replica saw it)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- one attempt ---------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        cfg = self.cfg
        try:
            lease = self.api.read_namespaced_lease(cfg.name, cfg.namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            lease = None
        now = datetime.now(UTC)
        if lease is None:
            spec = claim(None, cfg.identity, True, cfg.duration, now)
            body = {"metadata": {"name": cfg.name, "namespace": cfg.namespace}, "spec": spec}
            try:
                self.api.create_namespaced_lease(cfg.namespace, body)
            except ApiException as err:
                if err.status == 409:  # another replica created it first
                    return False
                raise
            return True
        current = self.api.api_client.sanitize_for_serialization(lease.spec) or {}
        seen = (
            current.get("holderIdentity"),
            current.get("renewTime"),
            current.get("leaseDurationSeconds"),
        )
        if self._observed is None or self._observed[0] != seen:
            self._observed = (seen, self.clock())
        duration = float(current.get("leaseDurationSeconds") or self.cfg.duration)
        expired = self.clock() - self._observed[1] >= duration
        spec = claim(current, cfg.identity, expired, cfg.duration, now)
        if spec is None:
            return False
        body = {
            "metadata": {
                "name": cfg.name,
                "namespace": cfg.namespace,
                "resourceVersion": lease.metadata.resource_version,
            },
            "spec": spec,
        }
        try:
            self.api.replace_namespaced_lease(cfg.name, cfg.namespace, body)
        except ApiException as err:
            if err.status == 409:  # someone else wrote it since we read it
                return False
            raise
        return True

    def release(self) -> None:
        """Hand the Lease over at once: empty holder, expiring in a second."""
        cfg = self.cfg
        try:
            lease = self.api.read_namespaced_lease(cfg.name, cfg.namespace)
            if (lease.spec.holder_identity or "") != cfg.identity:
                return
            body = {
                "metadata": {
                    "name": cfg.name,
                    "namespace": cfg.namespace,
                    "resourceVersion": lease.metadata.resource_version,
                },
                "spec": {
                    "holderIdentity": "",
                    "leaseDurationSeconds": 1,
                    "renewTime": micro_time(datetime.now(UTC)),
                    "leaseTransitions": lease.spec.lease_transitions or 0,
                },
            }
            self.api.replace_namespaced_lease(cfg.name, cfg.namespace, body)
            log.info("released the leader lease %s/%s", cfg.namespace, cfg.name)
        except Exception as err:  # best effort: the Lease expires anyway
            log.warning("could not release the leader lease: %s", err)

    # ---- the loop ------------------------------------------------------------------------------

    def _attempt(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except Exception as err:
            log.warning("leader lease %s/%s: %s", self.cfg.namespace, self.cfg.name, err)
            return False

    def run(self, on_lead: Callable[[], None], on_lost: Callable[[], None]) -> None:
        cfg = self.cfg
        log.info("waiting to lead through lease %s/%s as %s", cfg.namespace, cfg.name, cfg.identity)
        while not self._attempt():
            if self._stop.wait(cfg.retry):
                return
        self.leading = True
        log.info("leading as %s", cfg.identity)
        on_lead()
        renewed = self.clock()
        while not self._stop.wait(cfg.retry):
            if self._attempt():
                renewed = self.clock()
            elif self.clock() - renewed > cfg.renew_deadline:
                self.leading = False
                log.error(
                    "could not renew the leader lease for %.0fs: stopping", cfg.renew_deadline
                )
                on_lost()
                return

    def start(self, on_lead: Callable[[], None], on_lost: Callable[[], None]) -> None:
        self._thread = threading.Thread(
            target=self.run, args=(on_lead, on_lost), name="leader-election", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop campaigning; release the Lease if held (call after reconciling stopped)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.cfg.retry + 5)
        if self.leading:
            self.leading = False
            self.release()


def lost_leadership() -> None:
    """A leader that cannot renew must stop acting before another can take over: exit now
    (as client-go does), and let Kubernetes restart this replica as a follower."""
    logging.shutdown()
    os._exit(1)
