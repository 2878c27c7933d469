"""The real apiserver and `kubegan validate` refuse and accept the same jobs, naming the same
field: every example of tests/support/cel_cases.py, applied with
`kubectl apply --dry-run=server` to the CRD the cluster fixture installed from crds/."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubegan_operator.api.crd import crd
from kubegan_operator.entry.cli import main

from tests.support.cel_cases import Example, crd_rules, examples
from tests.support.kube import Kubectl, wait_for

pytestmark = pytest.mark.timeout(300)

EXAMPLES = list(examples())
CRD_NAME = "gantrainingjobs.kubegan.io"
# kubectl names each refused object ("... GANTrainingJob.kubegan.io "x" is invalid: ..." when
# several are, 'The GANTrainingJob "x" is invalid:' when one is), then its problems, each as
# "<path>: <Invalid value|Unsupported value|...>: <detail>".
_REFUSED = re.compile(r'GANTrainingJob(?:\.kubegan\.io)? "([^"]+)" is invalid: ')
_PROBLEM = re.compile(
    r"(?:^|\n|\* |\[|, )(<nil>|[A-Za-z][\w.\[\]-]*): "
    r"(?:Invalid value|Unsupported value|Required value|Forbidden|Too long|Too many|"
    r"Duplicate value|Not found|Internal error)"
)
_CREATED = re.compile(r"^gantrainingjob\.kubegan\.io/(\S+) created \(server dry run\)$", re.M)


def _rules(obj: dict) -> list[tuple[str, str, str]]:
    return sorted((r.field, r.message, r.rule) for r in crd_rules(obj))


@pytest.fixture(scope="module")
def apiserver(cluster: Kubectl) -> Iterator[dict[str, str]]:
    """Object name -> what the apiserver said: "created", or the text of its refusal."""
    wait_for(
        "the installed CRD to hold the generated CEL rules (crds/ is `make crd`'s output)",
        lambda: _rules(cluster.get("crd", CRD_NAME)) == _rules(crd()),
        timeout=30,
    )
    namespace = f"cel-{uuid.uuid4().hex[:8]}"
    cluster.run("create", "namespace", namespace)
    try:
        stream = yaml.safe_dump_all([e.job for e in EXAMPLES], sort_keys=False)
        result = cluster.run(
            "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=stream, check=False
        )
        said = {name: "created" for name in _CREATED.findall(result.stdout)}
        headers = list(_REFUSED.finditer(result.stderr))
        for header, following in zip(headers, [*headers[1:], None], strict=True):
            end = following.start() if following else len(result.stderr)
            text = result.stderr[header.end() : end]
            said[header.group(1)] = text.split("\nError from server", 1)[0].strip()
        yield said
    finally:
        cluster.run("delete", "namespace", namespace, "--wait=false", check=False)


def _validate_paths(
    tmp_path: Path, example: Example, capsys: pytest.CaptureFixture[str]
) -> list[str]:
    path = tmp_path / f"{example.name}.yaml"
    path.write_text(yaml.safe_dump(example.job, sort_keys=False))
    main(["validate", str(path)])
    # A warning (e.g. workers that would be BestEffort) is not a refusal.
    lines = capsys.readouterr().err.splitlines()
    return sorted(line.split(": ", 1)[0] for line in lines if ": warning: " not in line)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e.name}-{e.case.field}")
def test_the_apiserver_agrees_with_validate(
    example: Example,
    apiserver: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    said = apiserver.get(example.name)
    assert said is not None, f"kubectl said nothing about {example.name}"
    python = _validate_paths(tmp_path, example, capsys)
    if not example.refused:
        assert (said, python) == ("created", [])
        return
    assert said != "created", f"the apiserver accepted what {example.case.field} refuses"
    paths = sorted(_PROBLEM.findall(said))
    assert paths == python == sorted(path for path, _ in example.expected()), said
    for path, message in example.expected():
        # A rule on a string field: the apiserver quotes the value before the message.
        quoted_value = r'("(?:[^"\\]|\\.)*": )?'
        assert re.search(
            re.escape(f"{path}: Invalid value: ") + quoted_value + re.escape(message), said
        ), said
