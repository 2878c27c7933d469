"""The contract (kubegan_api.contract) is the one place for what the operator and the
trainer share: no other module, test or benchmark writes one of its names or numbers as a
literal; the chart's rules, dashboard and templates use only names it declares; the design
page lists nothing it lacks; importing it pulls in no framework.

The grep is precise rather than broad, so it never flags a value that merely looks alike:
it reads string and number constants from each file's syntax tree (comments and docstrings
are prose and stay free to name things), and looks for
- an environment variable name, a label or annotation key or a metric name (with its
  exposed `_sum`/`_count`/`_bucket`/`_total` series) as a whole word inside a string;
- a pod path (`/etc/kubegan`, `/checkpoints`, the termination log) at the start of a
  string, and the data mount `/data` as a whole string (a job's data.path lies under it);
- a port or exit code of the contract that no other number could be mistaken for (the
  peer and metrics ports, 143), as an integer constant or as digits inside a string.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubegan_api import contract

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "api" / "kubegan_api" / "contract.py"
SCANNED = ("api", "operator", "trainer", "tests", "bench")
CHART = REPO / "charts" / "kubegan"

ENV_NAMES = {v for k, v in vars(contract).items() if k.startswith("ENV_")}
KEYS = {v for k, v in vars(contract).items() if k.endswith(("_LABEL", "_ANNOTATION", "_GATE"))}
KEYS = {k for k in KEYS if "/" in k}  # kubegan.io/...; not the metric label names
METRICS = set(contract.TRAINER_METRICS) | set(contract.OPERATOR_METRICS)
SERIES = {s: m for m in METRICS for s in (m, *contract.exposed_series(m))}
PATHS = (
    contract.CONFIG_DIR,
    contract.CHECKPOINT_ROOT,
    contract.DATA_ROOT,
    contract.TERMINATION_LOG_PATH,
)
NUMBERS = {*contract.PEER_PORTS, contract.METRICS_PORT, contract.EXIT_INTERRUPTED}

_NAME = r"(?<![\w.-]){}(?![\w-])"
_KEY = r"(?:(?<![\w.-])|(?<=-l)){}(?![\w-])"  # also in kubectl's `-lKEY=VALUE`
_STRING_PATTERNS = [
    (re.compile(_NAME.format(re.escape(name))), f"environment name {name}")
    for name in sorted(ENV_NAMES)
] + [(re.compile(_KEY.format(re.escape(key))), f"key {key}") for key in sorted(KEYS)]
_METRIC = re.compile(r"\bkubegan_[a-z_]+\b")


def _path_pattern(path: str) -> re.Pattern[str]:
    # A job's own data.path may well lie under /data (where its claim is mounted): there
    # only the mount point itself is the contract's.
    end = "$" if path == contract.DATA_ROOT else r"(?![\w.-])"
    return re.compile("^" + re.escape(path) + end)


_PATH_START = [(_path_pattern(p), f"pod path {p}") for p in PATHS]
_DIGITS = re.compile(r"(?<![\d.])(" + "|".join(map(str, sorted(NUMBERS))) + r")(?![\d.])")


def _python_files() -> Iterator[Path]:
    for root in SCANNED:
        for path in sorted((REPO / root).rglob("*.py")):
            if path != CONTRACT and ".venv" not in path.parts:
                yield path


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def _strings(tree: ast.AST) -> Iterator[tuple[ast.Constant, bool]]:
    """Every string constant outside docstrings, and whether it starts its string (the first
    piece of an f-string does; the pieces after a `{...}` do not)."""
    skip = _docstrings(tree)
    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inner.update(id(v) for v in node.values[1:])
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node, id(node) not in inner


def _function_names() -> set[str]:
    """Every function defined in the operator: a string naming one is a reference to it,
    not a metric (kopf names an index after its handler, and `kubegan_jobs` indexes jobs)."""
    return {
        node.name
        for path in sorted((REPO / "operator").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


FUNCTIONS = _function_names()


def literal_problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    problems = []
    for node, starts in _strings(tree):
        text = node.value
        found = [what for pattern, what in _STRING_PATTERNS if pattern.search(text)]
        if text not in FUNCTIONS:
            found += [f"metric {m}" for m in _METRIC.findall(text) if m in SERIES]
        if starts:
            found += [what for pattern, what in _PATH_START if pattern.search(text)]
        found += [f"number {n}" for n in _DIGITS.findall(text)]
        problems += [f"{where}:{node.lineno}: {what} in {text[:60]!r}" for what in found]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value in NUMBERS:
            problems.append(f"{where}:{node.lineno}: number {node.value}")
    return problems


def test_no_contract_name_or_number_is_written_outside_the_contract() -> None:
    problems = [p for path in _python_files() for p in literal_problems(path)]
    assert not problems, "use kubegan_api.contract instead:\n" + "\n".join(problems)


def test_the_grep_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The scanner itself: each kind of literal is caught, prose and look-alikes are not."""
    name, key, metric = contract.ENV_CONFIG, contract.JOB_NAME_LABEL, contract.EPOCH_DURATION
    port, path = contract.TORCH_MASTER_PORT, contract.CHECKPOINT_ROOT
    source = "\n".join(
        [
            f'"""Docstrings may say {name}, {key}, {metric} and {port}."""',
            f"# comments too: {name}",
            f"a = {name!r}",
            f"b = f'{{x}}={key}'",
            f"c = '{metric}_count'",
            f"d = {port}",
            f"e = '{path}/x'",
            f"f = f'{{root}}{path}'",  # under another root: not the pod's path
            "g = 'kubegan_trainer'",  # a module, not a metric
            f"h = '{name}_EXTRA'",  # another variable
            f"i = 'port {port}'",
            f"j = {port + 1}",
            f"k = f'-l{key}={{name}}'",  # kubectl's selector flag
            f"l = {contract.JOBS!r}",  # names the operator's kopf index (a function): no metric
        ]
    )
    probe = tmp_path / "probe.py"
    probe.write_text(source, encoding="utf-8")
    found = literal_problems(probe)
    assert sorted(p.split(": ", 1)[1].split(" in ")[0] for p in found) == sorted(
        [
            f"environment name {name}",
            f"key {key}",
            f"metric {metric}_count",
            f"pod path {path}",
            f"number {port}",
            f"number {port}",
            f"key {key}",
        ]
    ), found


def _chart_text(*names: str) -> Iterator[tuple[Path, str]]:
    # files/ holds folders too (files/prices/: the price catalogues): their files are read.
    files = (p for p in (CHART / "files").rglob("*") if p.is_file())
    paths = [*(CHART / "templates").iterdir(), *files]
    for path in sorted(p for p in paths if not names or p.name in names):
        yield path.relative_to(REPO), path.read_text(encoding="utf-8")


def test_the_chart_uses_only_metric_names_the_contract_declares() -> None:
    """What the alerting rules and the dashboard query (the other templates name modules)."""
    used: dict[str, set[Path]] = {}
    for path, text in _chart_text("prometheusrule.yaml", "dashboard.json"):
        for series in _METRIC.findall(text):
            used.setdefault(series, set()).add(path)
    unknown = {s: sorted(map(str, p)) for s, p in used.items() if s not in SERIES}
    assert not unknown, f"the chart queries metrics the contract does not declare: {unknown}"
    # The rules and the dashboard query both sides' metrics.
    queried = {SERIES[s] for s in used}
    assert queried & set(contract.TRAINER_METRICS) and queried & set(contract.OPERATOR_METRICS)


def test_the_chart_uses_only_environment_names_and_keys_the_contract_declares() -> None:
    for path, text in _chart_text():
        for name in re.findall(r"\bKUBEGAN_[A-Z0-9_]+\b", text):
            assert name in ENV_NAMES, f"{path}: {name} is not in the contract"
        for key in re.findall(r"\bkubegan\.io/[a-z0-9-]+", text):
            assert key in KEYS, f"{path}: {key} is not in the contract"
        # Prometheus spells a pod label as __meta_kubernetes_pod_label_<key, sanitized>.
        for label in re.findall(r"__meta_kubernetes_pod_label_(\w+)", text):
            assert label in {re.sub(r"\W", "_", k) for k in KEYS}, f"{path}: label {label}"


def _design_section(number: int) -> str:
    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    match = re.search(rf"^## {number}\. .*?(?=^## )", text, re.S | re.M)
    assert match, f"docs/design.md has no section {number}"
    return match.group(0)


def test_the_design_page_names_nothing_the_contract_lacks() -> None:
    env = set(re.findall(r"\bKUBEGAN_[A-Z_]+\b", _design_section(4)))
    assert env and env <= ENV_NAMES, env - ENV_NAMES
    metrics = set(re.findall(r"`(kubegan_[a-z_]+)`", _design_section(6)))
    assert metrics and metrics <= METRICS, metrics - METRICS
    assert contract.CONFIG_PATH in _design_section(4)


@pytest.mark.parametrize(
    ("value", "position"),
    [
        (contract.termination_message(3, 7, 1.5), (3, 7)),
        ("Traceback (most recent call last):", None),
        ('{"checkpoint": {"epoch": -1, "step": 0}}', None),
        ('{"checkpoint": {"epoch": true, "step": 0}}', None),
        ('{"checkpoint": [1, 2]}', None),
        ("[]", None),
        (" " * contract.TERMINATION_MESSAGE_MAX + contract.termination_message(1, 0, 0), None),
        (None, None),
    ],
)
def test_the_termination_message_reads_back_only_what_the_trainer_writes(
    value: object, position: tuple[int, int] | None
) -> None:
    assert contract.parse_termination_message(value) == position


@pytest.mark.parametrize(
    ("lost", "expected"),
    [
        ({"steps": 3, "reason": "not committed"}, (3, "not committed")),
        ({"steps": 3, "reason": "a\n\tb"}, (3, "a b")),
        ({"steps": 3, "reason": "x" * 5000}, None),  # the whole message is over 4 KiB
        ({"steps": 3, "reason": "x" * 3000}, (3, "x" * 509 + "...")),
        ({"steps": -1, "reason": "r"}, None),
        ({"steps": True, "reason": "r"}, None),
        ({"steps": 1.5, "reason": "r"}, None),
        ({"steps": 1, "reason": ["r"]}, None),
        ({"steps": 1}, None),
        ("lost", None),
        (None, None),
    ],
)
def test_lost_work_reads_back_only_what_the_trainer_writes(
    lost: object, expected: tuple[int, str] | None
) -> None:
    message = contract.termination_message(1, 0, 0)
    if lost is not None:
        message = message[:-1] + ', "lost": ' + json.dumps(lost) + "}"
    assert contract.parse_lost_work(message) == expected
    assert contract.parse_lost_work("not json") is None


def test_names_follow_the_rules() -> None:
    assert contract.worker_name("g", 3) == f"g{contract.WORKER_SUFFIX}3"
    assert contract.service_name("g") == "g"
    assert contract.config_map_name("g") == f"g{contract.CONFIG_MAP_SUFFIX}"
    assert f"{contract.CONFIG_DIR}/{contract.CONFIG_FILE}" == contract.CONFIG_PATH
    assert len(set(contract.PEER_PORTS)) == len(contract.PEER_PORTS)
    assert contract.METRICS_PORT not in contract.PEER_PORTS
    assert set(contract.EXIT_MEANINGS) == {
        contract.EXIT_OK,
        contract.EXIT_USER_ERROR,
        contract.EXIT_STOPPED,
        contract.EXIT_INTERRUPTED,
    }


def test_importing_the_contract_pulls_in_no_framework() -> None:
    code = (
        "import sys, kubegan_api.contract; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'torch', 'tensorflow', 'pydantic', 'numpy', 'kubegan_operator'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
