"""`kubegan operator --gang native`: a gang is one scheduling.k8s.io/v1alpha2
PodGroup per attempt, its workers join it instead of carrying kubegan's gate, and reconcile
never lifts a gate for them: the scheduler holds them until all exist. The default stays
kubegan's gate. (tests/cluster/test_native_gang.py runs it against a real scheduler.)"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from kubegan_api.contract import ATTEMPT_LABEL, GANG_GATE, KUEUE_ADMISSION_GATE
from kubegan_operator.decide.context import Decision
from kubegan_operator.decide.snapshot import JobSnapshot
from kubegan_operator.entry.cli import build_parser, main
from kubegan_operator.foundation.trainer_metrics import ProgressUpdate
from kubegan_operator.manifests.pod_groups import join_pod_group
from kubegan_operator.placement.gang import POD_GROUP_API, GangMode, pod_group_name

from tests.support.world import PLAN, JobWorld, running_world
from tests.support.world import gan_job as job


class NativeWorld(JobWorld):
    """A JobWorld whose operator runs with --gang native; the PodGroups it creates and
    deletes are kept in `groups` (the operator never reads them back)."""

    def __init__(self, job: dict[str, Any], **kw: Any) -> None:
        self.groups: dict[str, dict[str, Any]] = {}
        super().__init__(job, **kw)

    def snapshot(self, progress: ProgressUpdate | None = None) -> JobSnapshot:
        return dataclasses.replace(super().snapshot(progress), gang=GangMode.native)

    def add_owned(self, body: dict[str, Any]) -> dict[str, Any]:
        if body["kind"] == "PodGroup":
            self.groups.setdefault(body["metadata"]["name"], body)
            return body
        return super().add_owned(body)

    def step(self, seconds: float = 1.0, progress: ProgressUpdate | None = None) -> Decision:
        d = super().step(seconds, progress)
        for name in d.delete_groups:
            self.groups.pop(name, None)
        return d


def kinds(d: Decision) -> list[str]:
    return [o["kind"] for o in d.create]


def test_a_native_gang_is_one_podgroup_and_workers_that_join_it_ungated() -> None:
    w = NativeWorld(job())
    d = w.step()
    assert kinds(d) == ["PodGroup", "Pod", "Pod"]  # the group first: apply creates it first
    group = d.create[0]
    assert group["apiVersion"] == POD_GROUP_API
    assert group["metadata"]["name"] == "g-attempt-0"
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}}
    (owner,) = group["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("GANTrainingJob", w.job["metadata"]["uid"])
    for pod in d.create[1:]:
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "g-attempt-0"}
        assert "schedulingGates" not in pod["spec"]
        # Still pinned to the planned node: the scheduler places the gang where it was planned.
        affinity = pod["spec"]["affinity"]["nodeAffinity"]
        terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms[0]["matchFields"][0]["values"] in (["n0"], ["n1"])
    assert "native PodGroup" in w.condition("Created")["message"]


def test_reconcile_lifts_no_gate_and_waits_for_the_scheduler() -> None:
    w = NativeWorld(job())
    w.step()
    d = w.step()  # every worker exists: with gates this sync would lift them
    assert d.lift_gates == [] and not d.create and not d.delete_pods
    assert w.status["phase"] == "Pending"
    w.schedule_and_run()  # asserts no worker carries a gate
    w.step()
    assert w.status["phase"] == "Running"
    assert (w.status["attempt"], w.status["restarts"], w.status["preemptions"]) == (0, 0, 0)


def test_a_cut_short_native_gang_is_completed_with_its_group() -> None:
    w = NativeWorld(job())
    w.step()
    del w.pods["g-worker-1"]  # the operator died after creating one worker
    w.groups.clear()  # and before its group
    d = w.step()
    # None bound yet, so nothing started: finish the gang (the group again, a 409 if there).
    assert [o["metadata"]["name"] for o in d.create] == ["g-attempt-0", "g-worker-1"]
    assert w.status["attempt"] == 0 and w.plans_made == 1 and not d.delete_pods


def test_a_restarted_native_gang_deletes_its_group_and_the_next_has_its_own() -> None:
    w = NativeWorld(job())
    w.step()
    w.schedule_and_run()
    w.step()
    assert w.status["phase"] == "Running"
    del w.pods["g-worker-1"]  # a bound worker vanished: the gang restarts
    d = w.step()
    assert d.delete_groups == ["g-attempt-0"] and w.status["attempt"] == 1
    d = w.step()
    assert kinds(d) == ["PodGroup", "Pod", "Pod"]
    assert d.create[0]["metadata"]["name"] == "g-attempt-1"
    assert {p["metadata"]["labels"][ATTEMPT_LABEL] for p in w.pods.values()} == {"1"}
    assert set(w.groups) == {"g-attempt-1"}


def test_a_native_gang_of_one_needs_no_group() -> None:
    w = NativeWorld(job(), plan=dataclasses.replace(PLAN, workers=1, nodes=("n0",)))
    d = w.step()
    assert kinds(d) == ["Pod"]
    assert "schedulingGroup" not in d.create[0]["spec"]
    assert "schedulingGates" not in d.create[0]["spec"]


def test_gates_stay_the_default() -> None:
    d = JobWorld(job()).step()
    assert kinds(d) == ["Pod", "Pod"]
    for pod in d.create:
        assert pod["spec"]["schedulingGates"] == [{"name": GANG_GATE}]
        assert "schedulingGroup" not in pod["spec"]
    assert running_world().status["phase"] == "Running"


def test_joining_a_group_removes_only_kubegans_gate() -> None:
    pod = {"spec": {"schedulingGates": [{"name": GANG_GATE}, {"name": KUEUE_ADMISSION_GATE}]}}
    joined = join_pod_group(pod, pod_group_name("g", 3))
    assert joined["spec"]["schedulingGates"] == [{"name": KUEUE_ADMISSION_GATE}]
    assert joined["spec"]["schedulingGroup"] == {"podGroupName": "g-attempt-3"}
    assert pod["spec"]["schedulingGates"][0] == {"name": GANG_GATE}  # the input is unchanged
    alone = join_pod_group({"spec": {"schedulingGates": [{"name": GANG_GATE}]}}, "x")
    assert "schedulingGates" not in alone["spec"]


def test_the_gang_flag_defaults_to_gates() -> None:
    parser = build_parser()
    assert parser.parse_args(["operator"]).gang == "gates"
    assert parser.parse_args(["operator", "--gang", "native"]).gang == "native"


def test_a_bad_gang_value_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["operator", "--gang", "kueue"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "--gang: invalid choice: 'kueue' (choose from 'gates', 'native')" in err
