"""The chart's kueue.defaultQueues reaches the operator as --default-queue, one per
namespace, and is read by the operator's own parser as the namespace -> LocalQueue map its
jobs without a queue label of their own are handed to; a name that is not a DNS label is
refused by values.schema.json."""

from __future__ import annotations

from typing import Any

import pytest
from kubegan_operator.entry.cli import build_parser
from kubegan_operator.entry.main import default_queues

from tests.helm.chart import CHART, by_kind, helm, template


def operator_args(docs: list[dict[str, Any]]) -> list[str]:
    (deploy,) = by_kind(docs, "Deployment")
    return list(deploy["spec"]["template"]["spec"]["containers"][0]["args"])


def queues_read(args: list[str]) -> dict[str, str]:
    """The map the operator builds from the chart's arguments."""
    parsed = build_parser().parse_args(args)
    return default_queues(parsed.default_queue or [])


def test_no_default_queue_unless_set() -> None:
    args = operator_args(template())
    assert not [a for a in args if a.startswith("--default-queue")]
    assert queues_read(args) == {}


def test_default_queues_reach_the_operator() -> None:
    args = operator_args(
        template(
            "--set",
            "kueue.defaultQueues.team-a=team-a-gpus",
            "--set",
            "kueue.defaultQueues.team-b=shared",
        )
    )
    assert "--default-queue=team-a=team-a-gpus" in args
    assert queues_read(args) == {"team-a": "team-a-gpus", "team-b": "shared"}


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("kueue.defaultQueues.team-a=Team_A", "Team_A"),
        # Helm's schema check names a bad key but places it wrongly: the key is what it says.
        ("kueue.defaultQueues.Team=q", "'Team'"),
        ("kueue.defaultQueue.team-a=q", "defaultQueue"),
    ],
)
def test_a_name_that_is_not_a_dns_label_is_refused(setting: str, named: str) -> None:
    result = helm("template", "kubegan", str(CHART), "--set-string", setting, check=False)
    assert result.returncode != 0
    assert named in result.stderr, result.stderr
