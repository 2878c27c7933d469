"""`--prices-from prometheus://...` against a real Prometheus (Debian's) that scrapes OpenCost's
node series: node_total_hourly_cost, kubecost_node_is_spot and node_gpu_count with OpenCost's
names and labels (pkg/costmodel/metrics.go: instance, node, instance_type, region,
provider_id, arch, uid), served in the text exposition format by a small exporter of the test's
own. OpenCost itself is not run here (it needs a cluster and a cloud's prices): its series are.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import yaml
from kubegan_operator.api.price_file import Pair
from kubegan_operator.runtime.price_sources import read_opencost

from tests.monitoring.prom import prometheus
from tests.support.kube import wait_for
from tests.support.scripted_http import Answer, scripted_server
from tests.support.world import node

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "acgan-gke-l4-spot.yaml"

# (node, instance type, USD per hour, on spot, GPUs)
NODES = [
    ("gke-l4-spot-1", "g2-standard-8", 0.341448, True, 1),
    ("gke-l4-spot-2", "g2-standard-8", 0.341448, True, 1),
    ("gke-l4-1", "g2-standard-8", 0.853608, False, 1),
    ("gke-a100-1", "a2-highgpu-1g", 3.673385, False, 1),
    ("gke-n1-t4x1", "n1-standard-8", 0.73, False, 1),
    ("gke-n1-t4x4", "n1-standard-8", 1.78, False, 4),
]


def exposition() -> bytes:
    """What OpenCost's /metrics says of these nodes."""
    families = {
        "node_total_hourly_cost": "node_total_hourly_cost Total node cost per hour",
        "kubecost_node_is_spot": "kubecost_node_is_spot Cloud provider info about node "
        "preemptibility",
        "node_gpu_count": "node_gpu_count count of gpu on this node",
    }
    lines: list[str] = []
    for metric, help_text in families.items():
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        for name, kind, price, spot, gpus in NODES:
            labels = (
                f'arch="amd64",instance="{name}",instance_type="{kind}",node="{name}",'
                f'provider_id="gce://kubegan-test/us-central1-a/{name}",region="us-central1",'
                f'uid="uid-{name}"'
            )
            value = {"node_total_hourly_cost": price, "kubecost_node_is_spot": int(spot),
                     "node_gpu_count": gpus}[metric]  # fmt: skip
            lines.append(f"{metric}{{{labels}}} {value}")
    return ("\n".join(lines) + "\n").encode()


def exporter_answer(path: str, query: dict[str, str], _: int) -> Answer:
    assert path == "/metrics"
    return Answer(body=exposition(), headers=(("Content-Type", "text/plain; version=0.0.4"),))


def test_opencost_series_through_a_real_prometheus(tmp_path: Path) -> None:
    with scripted_server(exporter_answer) as exporter:
        target = exporter.url.removeprefix("http://")
        scrape = [
            {
                "job_name": "opencost",
                "honor_labels": True,  # as OpenCost's docs configure it: its node labels stay
                "scrape_interval": "1s",
                "static_configs": [{"targets": [target]}],
            }
        ]
        with prometheus(tmp_path, scrape) as prom:
            wait_for(
                "OpenCost's series in Prometheus",
                lambda: (
                    len(prom.query("kubecost_node_is_spot")) == len(NODES)
                    and len(prom.query("node_gpu_count")) == len(NODES)
                ),
                timeout=60,
            )
            today = datetime.now(UTC).date().isoformat()
            rows = read_opencost(prom.url, today)
            plan = run_plan(tmp_path, prom.url.replace("http://", "prometheus://"))

    assert (rows.cloud, rows.region, rows.as_of) == ("gcp", "us-central1", today)
    assert rows.machine_types == {
        "g2-standard-8": Pair(0.853608, 0.341448),  # on demand from gke-l4-1, spot from the rest
        "a2-highgpu-1g": Pair(3.673385, None),  # no spot node of it: no spot price
    }
    assert rows.notes == [
        "a2-highgpu-1g: only on-demand nodes",
        "n1-standard-8: its nodes have different GPU counts; left out",
    ]
    assert "node_total_hourly_cost" in rows.source and prom.url in rows.source

    # `kubegan plan --prices-from` on a g2-standard-8 spot node: OpenCost's price, not the file's.
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["costPerHour"] == 0.341448


def run_plan(tmp_path: Path, address: str) -> subprocess.CompletedProcess[str]:
    g2 = {"node.kubernetes.io/instance-type": "g2-standard-8"}
    item = node("gke-l4-spot-1", 1, accelerator="nvidia-l4", spot=True, cpu="8", memory="32Gi",
                pool="l4-spot", labels=g2)  # fmt: skip
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [item]}))
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "source: a file\nmachineTypes:\n  g2-standard-8: {onDemand: 9.0, spot: 8.0}\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "kubegan_operator.entry.cli", "plan", "--nodes", str(nodes),
         "--prices", str(prices), "--prices-from", address, str(EXAMPLE)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
