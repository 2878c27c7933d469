"""A job's spec.podTemplate laid over a rendered worker pod: what a team may add to its
workers (service account, pull secrets, priority, volumes, env, a tighter securityContext)
without undoing what kubegan sets."""

from __future__ import annotations

from typing import Any

from kubegan_api.podtemplate import PodTemplateSpec
from kubegan_api.reserved import TUNABLE_ENV


def _tighter_security_context(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """The trainer's securityContext with the template's over it. The API admits only fields
    that equal or tighten kubegan's (api/podtemplate.py), so the template's win, except that
    kubegan's capability drop of ALL stays whatever else is dropped."""
    merged = {**ours, **theirs}
    drop = ours["capabilities"]["drop"]
    extra = [c for c in theirs.get("capabilities", {}).get("drop", []) if c not in drop]
    merged["capabilities"] = {"drop": [*drop, *extra]}
    return merged


def apply_pod_template(pod: dict[str, Any], template: PodTemplateSpec) -> None:
    """Add a job's spec.podTemplate to one worker pod: labels and annotations (kubegan's own
    win), the pod fields, and for the trainer its env after kubegan's (the API refuses
    kubegan's names; the compute threads, a default, take the template's value), mounts and
    a tighter securityContext.

    The service account token stays unmounted (automountServiceAccountToken false): a
    workload-identity token reaches the trainer through a projected volume the template adds."""
    meta, spec = pod["metadata"], pod["spec"]
    meta["labels"] = {**template.metadata.labels, **meta["labels"]}
    meta["annotations"] = {**template.metadata.annotations, **meta.get("annotations", {})}
    t = template.spec
    if t.service_account_name:
        spec["serviceAccountName"] = t.service_account_name
    if t.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s.name} for s in t.image_pull_secrets]
    if t.priority_class_name:
        spec["priorityClassName"] = t.priority_class_name
    spec["volumes"] = [*spec["volumes"], *(v.to_api() for v in t.volumes)]
    container = spec["containers"][0]
    theirs = [e.to_api() for e in t.env]
    # A default kubegan lets a user tune takes the template's value, not a duplicate behind it.
    replaced = {e["name"] for e in theirs} & set(TUNABLE_ENV)
    container["env"] = [*(e for e in container["env"] if e["name"] not in replaced), *theirs]
    container["volumeMounts"] = [*container["volumeMounts"], *(m.to_api() for m in t.volume_mounts)]
    if t.security_context is not None:
        container["securityContext"] = _tighter_security_context(
            container["securityContext"], t.security_context.to_api()
        )
