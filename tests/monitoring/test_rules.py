"""The PrometheusRule's rules pass `promtool check rules`, and `promtool test
rules` plays input series through them: the no-progress alert fires for a hung job and not
for a slow or finished one; job-failed and over-budget fire as specified. Also every dashboard
query is valid PromQL (checked offline as recording rules)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_api.contract import EPOCH, JOB_COST, JOBS

from tests.helm.chart import VALUES, values_args
from tests.monitoring.prom import dashboard, panel_queries, promtool, rules_file

BUDGETS = [
    "--set-json",
    'monitoring.prometheusRule.costBudget.jobs=[{"namespace":"ml","name":"gan3d","dollars":50}]',
]


NO_DEFAULT = ["--set", "monitoring.prometheusRule.costBudget.defaultDollars=null"]


@pytest.mark.parametrize("preset", sorted(VALUES))
@pytest.mark.parametrize(
    "extra",
    [[], BUDGETS, NO_DEFAULT],
    ids=["default-budget", "per-job-budgets", "no-default-budget"],
)
def test_promtool_check_rules(tmp_path: Path, preset: str, extra: list[str]) -> None:
    spec = rules_file(tmp_path / "rules.yaml", *values_args(preset), *extra)
    result = promtool("check", "rules", str(tmp_path / "rules.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = {r["alert"] for g in spec["groups"] for r in g["rules"] if "alert" in r}
    expected = {"KubeganJobFailed", "KubeganJobNoEpochProgress", "KubeganJobOverBudget"}
    if "defaultDollars=null" in " ".join(extra):
        expected.discard("KubeganJobOverBudget")  # no default and no per-job budget
    assert alerts == expected


def _annotations(
    spec: dict[str, Any], alert: str, labels: dict[str, str], value: str
) -> dict[str, str]:
    """The rule's annotations with Prometheus's template expanded for these labels/value."""
    rule = next(r for g in spec["groups"] for r in g["rules"] if r.get("alert") == alert)
    out = {}
    for key, text in rule["annotations"].items():
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
        text = text.replace('{{ printf "%.2f" $value }}', f"{float(value):.2f}")
        out[key] = text.replace("{{ $value }}", value)
    return out


def test_alerts_fire_on_input_series(tmp_path: Path) -> None:
    spec = rules_file(tmp_path / "rules.yaml", *BUDGETS)  # noProgressMinutes: 30 (default)
    sev = {"severity": "warning"}

    def alert(name: str, value: str, **labels: str) -> dict[str, Any]:
        return {
            "exp_labels": {**labels, **sev},
            "exp_annotations": _annotations(spec, name, labels, value),
        }

    no_progress = "KubeganJobNoEpochProgress"
    stuck = {"namespace": "ml", "ganjob": "stuck"}
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # three epochs, then the gang hangs (e.g. a collective waiting on a lost peer)
                    {
                        "series": EPOCH + '{namespace="ml",ganjob="stuck",pod="w-0"}',
                        "values": "0 1 2 3x60",
                    },
                    # an epoch every 20 minutes: slow but alive, below the 30-minute threshold
                    {
                        "series": EPOCH + '{namespace="ml",ganjob="slow"}',
                        "values": "0x19 1x19 2x19 3x3",
                    },
                    # finished after 3 epochs: its trainer (and the series) are gone
                    {
                        "series": EPOCH + '{namespace="ml",ganjob="done"}',
                        "values": "0 1 2 3 _x59",
                    },
                    # the operator's per-phase job count
                    {"series": JOBS + '{phase="Failed"}', "values": "0x4 1x59"},
                    # accrued cost: gan3d has a 50 USD budget; other jobs the default 1000 USD
                    {
                        "series": JOB_COST + '{namespace="ml",ganjob="gan3d"}',
                        "values": "0+10x63",
                    },
                    {
                        "series": JOB_COST + '{namespace="ml",ganjob="cheap"}',
                        "values": "0+10x63",
                    },
                    {
                        "series": JOB_COST + '{namespace="ml",ganjob="big"}',
                        "values": "0+200x63",
                    },
                ],
                "alert_rule_test": [
                    # stuck since minute 3: 20 minutes later it is only pending
                    {"eval_time": "25m", "alertname": no_progress, "exp_alerts": []},
                    # 5-minute window without change from minute 8, plus `for: 30m`
                    {
                        "eval_time": "39m",
                        "alertname": no_progress,
                        "exp_alerts": [alert(no_progress, "0", **stuck)],
                    },
                    {
                        "eval_time": "60m",
                        "alertname": no_progress,
                        "exp_alerts": [alert(no_progress, "0", **stuck)],
                    },
                    {"eval_time": "3m", "alertname": "KubeganJobFailed", "exp_alerts": []},
                    {
                        "eval_time": "6m",
                        "alertname": "KubeganJobFailed",
                        "exp_alerts": [
                            {
                                "exp_labels": {"phase": "Failed", **sev},
                                "exp_annotations": _annotations(spec, "KubeganJobFailed", {}, "1"),
                            }
                        ],
                    },
                    {"eval_time": "5m", "alertname": "KubeganJobOverBudget", "exp_alerts": []},
                    # gan3d passes its own 50 USD at minute 6, big the default 1000 at minute 6;
                    # cheap (60 USD) is far below the default and has no budget of its own
                    {
                        "eval_time": "6m",
                        "alertname": "KubeganJobOverBudget",
                        "exp_alerts": [
                            alert("KubeganJobOverBudget", "60", namespace="ml", ganjob="gan3d"),
                            alert("KubeganJobOverBudget", "1200", namespace="ml", ganjob="big"),
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = promtool("test", "rules", str(tmp_path / "tests.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    queries = panel_queries(dashboard())
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"kubegan:dashboard_query_{i}", "expr": expr}
                    for i, (_, expr) in enumerate(queries)
                ],
            }
        ]
    }
    (tmp_path / "dashboard-rules.yaml").write_text(yaml.safe_dump(rules))
    result = promtool("check", "rules", str(tmp_path / "dashboard-rules.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
