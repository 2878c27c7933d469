"""Thin Kubernetes API access for the operator: read what reconcile needs, apply its actions."""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import yaml
from kubegan_api.contract import GANG_GATE, KUEUE_FINALIZER
from kubegan_api.spec import GROUP, KIND, PLURAL, VERSION
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubegan_operator.placement.gang import POD_GROUP_API, POD_GROUP_KIND, POD_GROUP_PLURAL

log = logging.getLogger("kubegan.kube")

# Threads the controller sends requests from (controller.Controller's pool), plus its two
# event posters: one pooled connection each, so no request waits for another's connection
# and none opens (and TLS-handshakes) a connection only to throw it away.
API_THREADS = 128
EVENT_THREADS = 2


# A JSON patch whose `test` fails is refused with one of these (the apiserver's versions
# differ); the gate list changed since it was read.
GATE_LIST_CHANGED = frozenset({400, 409, 422})
LIFT_ATTEMPTS = 5
# The Kueue API the operator reads (Kueue v0.17.1 stores and serves v1beta2).
KUEUE_API = "kueue.x-k8s.io/v1beta2"


def _entry_removal(path: str, values: Sequence[Any], value: str, key: str = "") -> list[Any] | None:
    """A JSON patch that removes `value` from the list at `path` (whose entries read as
    `values`) and nothing else, refused if that entry moved meanwhile (its `key` field, or
    the entry itself, is tested); None when `value` is not there."""
    if value not in values:
        return None
    entry = f"{path}/{list(values).index(value)}"
    return [
        {"op": "test", "path": f"{entry}/{key}" if key else entry, "value": value},
        {"op": "remove", "path": entry},
    ]


def gate_removal(gates: Sequence[Mapping[str, Any]], gate: str = GANG_GATE) -> list[Any] | None:
    """A JSON patch that removes `gate` from a pod whose scheduling gates are `gates` and
    nothing else, refused if that entry moved meanwhile; None when `gate` is not there."""
    names = [g.get("name") for g in gates]
    return _entry_removal("/spec/schedulingGates", names, gate, "name")


def finalizer_removal(
    finalizers: Sequence[str], finalizer: str = KUEUE_FINALIZER
) -> list[Any] | None:
    """A JSON patch that removes `finalizer` from an object whose finalizers are `finalizers`
    and nothing else (another controller's stay), refused if that entry moved meanwhile;
    None when it is not there."""
    return _entry_removal("/metadata/finalizers", finalizers, finalizer)


# Where the operator creates each kind it creates (a native gang's PodGroup with --gang native).
_CREATED = {
    "Service": "/api/v1/namespaces/{ns}/services",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Pod": "/api/v1/namespaces/{ns}/pods",
    "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    POD_GROUP_KIND: f"/apis/{POD_GROUP_API}/namespaces/{{ns}}/{POD_GROUP_PLURAL}",
}

KUBECONFIG_MAX_BYTES = 16 * 1024 * 1024  # kubeconfigs are kilobytes; bounds a runaway file


class KubeconfigError(Exception):
    """No usable credentials for the Kubernetes API; the message is one line."""


def kubeconfig_files(environ: Mapping[str, str]) -> list[str]:
    """The kubeconfig files kubectl would read: $KUBECONFIG's list, else ~/.kube/config."""
    listed = environ.get("KUBECONFIG", "")
    if listed:
        return [p for p in listed.split(os.pathsep) if p]
    home = environ.get("HOME") or os.path.expanduser("~")
    return [os.path.join(home, ".kube", "config")]


def _file_problem(path: str) -> str | None:
    """Why `path` cannot be a kubeconfig before it is opened (a FIFO would block)."""
    try:
        info = os.stat(path)
    except OSError as err:
        return err.strerror or str(err)
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_size > KUBECONFIG_MAX_BYTES:
        return f"larger than {KUBECONFIG_MAX_BYTES >> 20} MiB"
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200]


def _config_reason(err: BaseException) -> str:
    """What is wrong with a kubeconfig, from what loading it raised, in words a user can
    act on (the client's own: "while parsing a flow node", "list indices must be ...")."""
    if isinstance(err, yaml.YAMLError):
        mark = getattr(err, "problem_mark", None)
        return "invalid YAML" + (f" at line {mark.line + 1}" if mark is not None else "")
    if isinstance(err, config.ConfigException):
        return _first_line(err)
    return "not a kubeconfig (expected a mapping with clusters, contexts, users)"


def load_credentials(environ: Mapping[str, str] | None = None) -> None:
    """Load the kubeconfig (or the in-cluster service account) into the client's default
    configuration, or raise KubeconfigError saying in one line what is missing or wrong.

    The client's own `config.load_config()` is not used: without a kubeconfig it prints
    "... Using inCluster Config. This might not work." and then fails with "Service
    host/port is not set.", neither of which tells the user what to fix."""
    env = os.environ if environ is None else environ
    files = kubeconfig_files(env)
    present = [f for f in files if os.path.lexists(f)]
    for f in present:
        problem = _file_problem(f)
        if problem:
            raise KubeconfigError(f"kubeconfig {f}: {problem}")
    if present:
        try:
            config.load_kube_config(config_file=os.pathsep.join(present))
        except Exception as err:  # YAML errors, ConfigException, malformed entries
            where = ", ".join(present)
            raise KubeconfigError(f"kubeconfig {where}: {_config_reason(err)}") from None
        return
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT"):
        try:
            config.load_incluster_config()
        except Exception as err:  # no service account token mounted, ...
            raise KubeconfigError(f"in-cluster config: {_first_line(err)}") from None
        return
    named = f"KUBECONFIG names {', '.join(files)}" if env.get("KUBECONFIG") else files[0]
    raise KubeconfigError(
        f"no kubeconfig: {named}: no such file, and not running in a cluster "
        "(KUBERNETES_SERVICE_HOST is unset); set KUBECONFIG or create ~/.kube/config"
    )


class Kube:
    def __init__(self) -> None:
        load_credentials()
        cfg = client.Configuration.get_default_copy()
        cfg.connection_pool_maxsize = API_THREADS + EVENT_THREADS
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

    def kueue_objects(
        self, namespace: str, workload: str, local_queue: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """A Kueue Workload and LocalQueue by name, each None when not found (or when Kueue,
        or the chart's permission to read them, is missing: a job waits all the same)."""
        return (
            self._get_or_none(f"/apis/{KUEUE_API}/namespaces/{namespace}/workloads/{workload}"),
            self._get_or_none(
                f"/apis/{KUEUE_API}/namespaces/{namespace}/localqueues/{local_queue}"
            ),
        )

    def serves(self, group_version: str, resource: str) -> bool:
        """Whether the apiserver serves `resource` of `group_version` (API discovery, which
        every authenticated user may read)."""
        found = self._get_or_none(f"/apis/{group_version}")
        return any(r.get("name") == resource for r in (found or {}).get("resources") or [])

    def _get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return self._send("GET", path, None)
        except ApiException as err:
            if err.status in (403, 404):
                return None
            raise

    # ---- writes -------------------------------------------------------------------------

    # Writes go through `_send`, not the generated API methods: those validate every
    # argument with pydantic (a rendered pod dict is turned into a V1Pod and back) and turn
    # every answer into model objects. At hundreds of requests a second that cost the operator
    # more CPU than anything it does itself; the apiserver validates the objects anyway.

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str = "application/json",
        query: list[tuple[str, str]] | None = None,
        *,
        answer: bool = True,
    ) -> dict[str, Any]:
        """One request; the answer as plain JSON (not parsed without `answer`: a pod's or a
        job's is kilobytes, and parsing answers nobody reads was a fifth of the operator's
        CPU). ApiException for any non-2xx answer, as the generated methods raise it."""
        request = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or None,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*request)
        data = response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(
                http_resp=response, body=data.decode("utf-8", "replace"), data=None
            )
        parsed: dict[str, Any] = json.loads(data) if data and answer else {}
        return parsed

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Create `obj`; a pod is returned as the apiserver stored it (the controller
        releases a gang the moment every worker exists), other kinds as {}. None when it was
        already there (a previous reconcile got this far, or the watch had not shown it yet)."""
        ns = obj["metadata"]["namespace"]
        try:
            path = _CREATED[obj["kind"]].format(ns=ns)
            return self._send("POST", path, obj, answer=obj["kind"] == "Pod")
        except ApiException as err:
            if err.status != 409:  # already there: a previous reconcile got this far
                raise
            return None

    def patch_spec(self, obj: dict[str, Any]) -> None:
        """Set a NetworkPolicy's spec back to `obj`'s (a merge patch: its lists replace the
        stored ones, and a field of the policy's spec it lacks is removed), over the version
        `obj` names (409 otherwise: read again); gone meanwhile is fine (the next sync
        creates it again)."""
        meta = obj["metadata"]
        stored = ("podSelector", "policyTypes", "ingress", "egress")
        body: dict[str, Any] = {"spec": {k: obj["spec"].get(k) for k in stored}}
        if meta.get("resourceVersion"):  # only over the version the decision saw
            body["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        path = _CREATED[obj["kind"]].format(ns=meta["namespace"]) + f"/{meta['name']}"
        try:
            self._send("PATCH", path, body, "application/merge-patch+json", answer=False)
        except ApiException as err:
            if err.status != 404:
                raise

    def lift_gates(self, namespace: str, name: str) -> None:
        """Remove kubegan's gang gate, and only it: other controllers' gates (Kueue's
        admission gate) stay. The first try assumes the rendered order (kubegan's gate
        first; admission webhooks append theirs), which saves a read per worker."""
        self._remove_entry(
            namespace,
            name,
            lambda pod: gate_removal((pod.get("spec") or {}).get("schedulingGates") or []),
            {"spec": {"schedulingGates": [{"name": GANG_GATE}]}},
            "scheduling gates",
        )

    def remove_finalizer(self, namespace: str, name: str) -> None:
        """Take Kueue's finalizer off one of kubegan's workers, and only that finalizer
        (podstate.kueue_finalizer_due says when). The first try assumes it is the pod's only
        finalizer, as Kueue's webhook leaves it."""
        self._remove_entry(
            namespace,
            name,
            lambda pod: finalizer_removal((pod.get("metadata") or {}).get("finalizers") or []),
            {"metadata": {"finalizers": [KUEUE_FINALIZER]}},
            "finalizers",
        )

    def _remove_entry(
        self,
        namespace: str,
        name: str,
        removal: Callable[[Mapping[str, Any]], list[Any] | None],
        guess: Mapping[str, Any],
        what: str,
    ) -> None:
        """Send the JSON patch `removal` makes of the pod, first as `guess` has it, then as
        read again each time the patch's `test` is refused (the list changed since it was
        read: it is never cut at the wrong place). Done when there is nothing to remove or
        the pod is gone."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        pod = guess
        for _ in range(LIFT_ATTEMPTS):
            patch = removal(pod)
            if patch is None:
                return  # removed already (by an earlier sync), or never there
            try:
                self._send("PATCH", path, patch, "application/json-patch+json", answer=False)
                return
            except ApiException as err:
                if err.status == 404:
                    return
                if err.status not in GATE_LIST_CHANGED:
                    raise
            try:
                pod = self._send("GET", path, None)
            except ApiException as err:
                if err.status == 404:
                    return
                raise
        raise ApiException(status=409, reason=f"pod {namespace}/{name}: its {what} kept changing")

    def delete_pod(self, namespace: str, name: str, force: bool) -> None:
        options: dict[str, Any] = {"propagationPolicy": "Background"}
        if force:
            options["gracePeriodSeconds"] = 0
        try:
            path = f"/api/v1/namespaces/{namespace}/pods/{name}"
            self._send("DELETE", path, options, answer=False)
        except ApiException as err:
            if err.status != 404:
                raise

    def delete_pod_group(self, namespace: str, name: str) -> None:
        """Delete a native gang's PodGroup (gone already is fine)."""
        try:
            path = f"/apis/{POD_GROUP_API}/namespaces/{namespace}/{POD_GROUP_PLURAL}/{name}"
            self._send("DELETE", path, {"propagationPolicy": "Background"}, answer=False)
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
        return self._send(
            "PATCH",
            f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status",
            body,
            "application/merge-patch+json",
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
            self._send("POST", f"/api/v1/namespaces/{meta['namespace']}/events", body, answer=False)
        except ApiException as err:  # events are best effort; never fail a reconcile on them
            log.warning("could not post event %s for %s: %s", reason, meta["name"], err.reason)
