"""A namespace's default worker identity (bucket access by workload identity): the
chart's workers.identities reaches the operator as --worker-identity NAMESPACE=SA and
--worker-identity-label NAMESPACE=KEY=VALUE; a job naming no service account runs as the
namespace's, with its labels; a job naming its own gets neither; the token stays unmounted;
bad flags are one line."""

from __future__ import annotations

from typing import Any

import pytest
from kubegan_operator.api.input_files import InputError
from kubegan_operator.decide.snapshot import WorkerIdentity
from kubegan_operator.entry.cli import build_parser
from kubegan_operator.entry.main import worker_identities

from tests.support.world import JobWorld, gan_job

AKS_LABEL = "azure.workload.identity/use"
IDENTITIES = {"ns": WorkerIdentity("gan-trainer", {AKS_LABEL: "true"})}


def workers(job: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
    pods = [o for o in JobWorld(job, **options).step().create if o["kind"] == "Pod"]
    assert pods
    return pods


def test_a_job_naming_no_account_runs_as_its_namespaces_identity() -> None:
    job = gan_job()
    for pod in workers(job, identities=IDENTITIES):
        assert pod["spec"]["serviceAccountName"] == "gan-trainer"
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert pod["metadata"]["labels"][AKS_LABEL] == "true"
    assert "podTemplate" not in job["spec"]  # the job object is not written back


def test_a_job_naming_its_own_account_gets_neither_account_nor_labels() -> None:
    job = gan_job()
    job["spec"]["podTemplate"] = {
        "metadata": {"labels": {"team": "a"}},
        "spec": {"serviceAccountName": "own"},
    }
    for pod in workers(job, identities=IDENTITIES):
        assert pod["spec"]["serviceAccountName"] == "own"
        assert AKS_LABEL not in pod["metadata"]["labels"]
        assert pod["metadata"]["labels"]["team"] == "a"


def test_the_jobs_own_labels_win_and_kubegans_stay() -> None:
    job = gan_job()
    job["spec"]["podTemplate"] = {"metadata": {"labels": {AKS_LABEL: "false"}}}
    plain = workers(gan_job())
    for pod, before in zip(workers(job, identities=IDENTITIES), plain, strict=True):
        assert pod["metadata"]["labels"][AKS_LABEL] == "false"
        for key, value in before["metadata"]["labels"].items():
            assert pod["metadata"]["labels"][key] == value


def test_another_namespaces_identity_is_not_this_ones() -> None:
    others = {"other": WorkerIdentity("x")}
    for pod in workers(gan_job(), identities=others):
        assert "serviceAccountName" not in pod["spec"]


def test_the_flags_build_one_identity_per_namespace() -> None:
    args = build_parser().parse_args(
        [
            "operator",
            "--worker-identity=ml=gan-trainer",
            f"--worker-identity-label=ml={AKS_LABEL}=true",
            "--worker-identity=team-b=sa.b",
        ]
    )
    assert worker_identities(args.worker_identity, args.worker_identity_label) == {
        "ml": WorkerIdentity("gan-trainer", {AKS_LABEL: "true"}),
        "team-b": WorkerIdentity("sa.b", {}),
    }


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--worker-identity", "ml"),
        ("--worker-identity", "ml="),
        ("--worker-identity", "ML=sa"),
        ("--worker-identity", "ml=Bad_Name"),
        ("--worker-identity", "ml=" + "a" * 254),
        ("--worker-identity-label", "ml=key"),
        ("--worker-identity-label", "ml=/k=v"),
        ("--worker-identity-label", "ml=a b=v"),
        ("--worker-identity-label", "ml=k=v v"),
        ("--worker-identity-label", "ml=k=" + "v" * 64),
        ("--worker-identity-label", "ml=Bad_Prefix/k=v"),
    ],
)
def test_a_bad_identity_flag_is_one_line(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["operator", f"{flag}={value}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not NAMESPACE=" in err, err


def test_two_accounts_for_one_namespace_or_a_label_without_one_are_refused() -> None:
    with pytest.raises(InputError) as err:
        worker_identities([("a", "s1"), ("a", "s2")], [("b", "k", "v")])
    said = str(err.value)
    assert "namespace a twice (s1, s2)" in said
    assert "namespace b has no --worker-identity" in said
