"""The chart's autoscaling values: declared pools reach the operator as a file it
parses the same way `kubegan operator --node-pools` does, Karpenter's NodePools are read only
when asked, and RBAC grows by exactly that one rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kubegan_operator.api.loading import load_node_pools

from tests.helm.chart import CHART, by_kind, helm, template

POOLS = [
    {
        "name": "l4-spot",
        "machineType": "g2-standard-8",
        "spot": True,
        "maxNodes": 4,
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    }
]


def operator_args(docs: list[dict[str, Any]]) -> list[str]:
    (deploy,) = by_kind(docs, "Deployment")
    return deploy["spec"]["template"]["spec"]["containers"][0]["args"]


def nodepool_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        r
        for role in by_kind(docs, "ClusterRole")
        for r in role["rules"]
        if "karpenter.sh" in r.get("apiGroups", [])
    ]


def test_by_default_no_pools_and_no_karpenter_rights() -> None:
    docs = template()
    args = operator_args(docs)
    assert not any(a.startswith("--node-pools") for a in args) and "--karpenter" not in args
    assert nodepool_rules(docs) == []


def test_declared_pools_reach_the_operator_as_a_file_it_reads(tmp_path: Path) -> None:
    docs = template("--set-json", f"autoscaling.pools={json.dumps(POOLS)}")
    assert "--node-pools=/etc/kubegan/prices/pools.yaml" in operator_args(docs)
    (cm,) = [c for c in by_kind(docs, "ConfigMap") if "pools.yaml" in c.get("data", {})]
    f = tmp_path / "pools.yaml"
    f.write_text(cm["data"]["pools.yaml"])
    (pool,) = load_node_pools(f)
    assert (pool.name, pool.spot, pool.shapes[0].gpus) == ("l4-spot", True, 1)
    assert yaml.safe_load(cm["data"]["pools.yaml"]) == POOLS


def test_karpenter_adds_one_read_only_rule() -> None:
    docs = template("--set", "autoscaling.karpenter=true")
    assert "--karpenter" in operator_args(docs)
    assert nodepool_rules(docs) == [
        {"apiGroups": ["karpenter.sh"], "resources": ["nodepools"], "verbs": ["list"]}
    ]


def test_a_pool_without_max_nodes_is_refused_by_the_schema() -> None:
    bad = [{"name": "l4-spot", "machineType": "g2-standard-8"}]
    result = helm(
        "template",
        "x",
        str(CHART),
        "--set-json",
        f"autoscaling.pools={json.dumps(bad)}",
        check=False,
    )
    assert result.returncode != 0 and "maxNodes" in result.stderr
