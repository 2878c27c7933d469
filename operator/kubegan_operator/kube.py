"""Thin Kubernetes API access for the operator: read what reconcile needs, apply its actions."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubegan_operator.api import GROUP, KIND, PLURAL, VERSION
from kubegan_operator.render import JOB_NAME_LABEL

log = logging.getLogger("kubegan.kube")


class Kube:
    def __init__(self) -> None:
        config.load_config()
        self.api = client.ApiClient()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def _plain(self, obj: Any) -> dict[str, Any]:
        return self.api.sanitize_for_serialization(obj)

    # ---- reads --------------------------------------------------------------------------

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def list_jobs(self, namespaces: list[str] | None) -> list[dict[str, Any]]:
        if not namespaces:
            return self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
        items: list[dict[str, Any]] = []
        for ns in namespaces:
            items += self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
        return items

    def job_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={name}")
        return [self._plain(p) for p in pods.items]

    def all_pods(self) -> list[dict[str, Any]]:
        """Pods holding node resources: every bound pod, plus kubegan workers not yet bound
        (they hold their planned node, see topology.build_inventory)."""
        bound = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
        waiting = self.core.list_pod_for_all_namespaces(
            field_selector="spec.nodeName=", label_selector=JOB_NAME_LABEL
        )
        return [self._plain(p) for p in [*bound.items, *waiting.items]]

    def nodes(self) -> list[dict[str, Any]]:
        return [self._plain(n) for n in self.core.list_node().items]

    def exists(self, kind: str, namespace: str, name: str) -> bool:
        read = {
            "Service": self.core.read_namespaced_service,
            "ConfigMap": self.core.read_namespaced_config_map,
        }[kind]
        try:
            read(name, namespace)
            return True
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    # ---- writes -------------------------------------------------------------------------

    def create(self, obj: dict[str, Any]) -> None:
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
        self, namespace: str, name: str, old: dict[str, Any], new: dict[str, Any]
    ) -> None:
        # A merge patch: keys the new status dropped must be sent as null to be removed.
        body = {**{k: None for k in old if k not in new}, **new}
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": body}
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
