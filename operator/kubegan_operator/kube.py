"""Thin Kubernetes API access for the operator: read what reconcile needs, apply its actions."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubegan_operator.api import GROUP, KIND, PLURAL, VERSION

log = logging.getLogger("kubegan.kube")


class Kube:
    def __init__(self) -> None:
        config.load_config()
        cfg = client.Configuration.get_default_copy()
        # One connection per API thread (controller.Controller's pool), none waiting for another.
        cfg.connection_pool_maxsize = 40
        self.api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def _plain(self, obj: Any) -> dict[str, Any]:
        return self.api.sanitize_for_serialization(obj)

    # ---- reads --------------------------------------------------------------------------

    def bound_pods(self) -> list[dict[str, Any]]:
        """Every pod bound to a node, cluster-wide. Only for an operator restricted to some
        namespaces, whose pod watch does not see the others: they hold GPUs too."""
        bound = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
        return [self._plain(p) for p in bound.items]

    # ---- writes -------------------------------------------------------------------------

    def create(self, obj: dict[str, Any]) -> None:
        """Create `obj`; one that is already there is fine (a previous reconcile got this
        far, or the watch had not shown it yet)."""
        ns = obj["metadata"]["namespace"]
        create = {
            "Service": self.core.create_namespaced_service,
            "ConfigMap": self.core.create_namespaced_config_map,
            "Pod": self.core.create_namespaced_pod,
        }[obj["kind"]]
        try:
            create(ns, obj)
        except ApiException as err:
            if err.status != 409:  # already there: a previous reconcile got this far
                raise

    def lift_gates(self, namespace: str, name: str) -> None:
        try:
            self.core.patch_namespaced_pod(
                name, namespace, [{"op": "replace", "path": "/spec/schedulingGates", "value": []}]
            )
        except ApiException as err:
            if err.status not in (404, 422):
                raise

    def delete_pod(self, namespace: str, name: str, force: bool) -> None:
        try:
            self.core.delete_namespaced_pod(
                name,
                namespace,
                grace_period_seconds=0 if force else None,
                propagation_policy="Background",
            )
        except ApiException as err:
            if err.status != 404:
                raise

    def delete_job(self, namespace: str, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, propagation_policy="Background"
            )
        except ApiException as err:
            if err.status != 404:
                raise

    def patch_status(
        self,
        namespace: str,
        name: str,
        old: dict[str, Any],
        new: dict[str, Any],
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Write the job's status; the job as it is now. With `resource_version`, only over
        that version of the job (409 otherwise): the status was computed from a cache that
        may lag, and counters written over a newer status would be lost or counted twice."""
        # A merge patch: keys the new status dropped must be sent as null to be removed.
        body: dict[str, Any] = {"status": {**{k: None for k in old if k not in new}, **new}}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, body
        )

    def event(self, job: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = job["metadata"]
        now = datetime.now(UTC)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "kubegan-operator"},
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
            "reportingComponent": "kubegan-operator",
        }
        try:
            self.core.create_namespaced_event(meta["namespace"], body)
        except ApiException as err:  # events are best effort; never fail a reconcile on them
            log.warning("could not post event %s for %s: %s", reason, meta["name"], err.reason)
