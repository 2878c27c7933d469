"""CEL and Python agree by construction: every CEL rule of the generated CRD has a
refused and an accepted example in tests/support/cel_cases.py, and `kubegan validate` refuses
the refused ones with the rule's path (and, where it says the rule's words, its message) and
accepts the others. tests/cluster/test_cel_agreement.py holds the apiserver to the same."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest
import yaml
from kubegan_api.rules import CROSS_FIELD_RULES, framework_rules, source_rules
from kubegan_api.sections import (
    MODELS_BY_FRAMEWORK,
    SOURCES_BY_MODEL,
    DataSource,
    DataSpec,
    Framework,
    ModelName,
    ModelSpec,
)
from kubegan_api.spec import GANTrainingJobSpec
from kubegan_operator.api.crd import crd
from kubegan_operator.entry.cli import main

from tests.support.cel_cases import CASES, Example, crd_rules, examples

WARNING = "kubegan validate: warning: "

EXAMPLES = list(examples())


def test_the_table_gives_every_crd_rule_examples_and_names_no_other() -> None:
    rules = crd_rules(crd())
    twice = [rid for rid, n in Counter(r.id for r in rules).items() if n > 1]
    assert not twice, f"rules that cannot be told apart by path and message: {twice}"
    covered = {case.rule for case in CASES if case.refused and case.accepted}
    missing = [r for r in rules if r.id not in covered]
    assert not missing, "CEL rules without a refused and an accepted example in " + (
        "tests/support/cel_cases.py:\n" + "\n".join(f"{r.field}: {r.message}" for r in missing)
    )
    stale = {case.rule for case in CASES} - {r.id for r in rules}
    assert not stale, f"cases for rules the CRD does not have: {sorted(stale)}"
    # The extra rules a refused example also breaks are rules too.
    also = {(f, m) for case in CASES for f, m in case.also}
    assert also <= {r.id for r in rules}


def test_model_and_source_rules_are_written_from_the_tables() -> None:
    # The generated rules hold exactly where the tables say, and follow a changed table.
    for framework, model in itertools.product(Framework, ModelName):
        holds = all(
            r.holds(_spec(framework, model, DataSource.synthetic)) for r in framework_rules()
        )
        assert holds == (model in MODELS_BY_FRAMEWORK[framework]), (framework, model)
    for source, model in itertools.product(DataSource, ModelName):
        holds = all(r.holds(_spec(Framework.pytorch, model, source)) for r in source_rules())
        assert holds == (source in SOURCES_BY_MODEL[model]), (source, model)
    assert {r.cel for r in framework_rules() + source_rules()} <= {r.cel for r in CROSS_FIELD_RULES}

    fewer = {**MODELS_BY_FRAMEWORK, Framework.tensorflow: frozenset({ModelName.gan3d})}
    assert [(r.message, r.cel) for r in framework_rules(fewer)] == [
        (
            "dcgan, acgan, pix2pix and custom are only available with framework pytorch",
            "!(self.model.name in ['dcgan', 'acgan', 'pix2pix', 'custom']) || "
            "self.framework == 'pytorch'",
        )
    ]
    assert framework_rules(dict.fromkeys(Framework, frozenset(ModelName))) == ()
    no_digits = {**SOURCES_BY_MODEL, ModelName.dcgan: frozenset({DataSource.synthetic})}
    assert [(r.message, r.cel) for r in source_rules(no_digits)] == [
        (
            "digits are 8x8 images; gan3d and pix2pix need source synthetic or files",
            "self.data.source != 'digits' || !(self.model.name in ['gan3d', 'pix2pix'])",
        ),
        (
            "digits are 8x8 images; dcgan needs source synthetic",
            "self.data.source != 'digits' || self.model.name != 'dcgan'",
        ),
        (
            "dcgan needs source synthetic",
            "self.data.source != 'files' || self.model.name != 'dcgan'",
        ),
    ]


def _spec(framework: Framework, model: ModelName, source: DataSource) -> GANTrainingJobSpec:
    """A spec with these three fields, built without validation (the rules are the check)."""
    return GANTrainingJobSpec.model_construct(
        framework=framework,
        model=ModelSpec.model_construct(name=model),
        data=DataSpec.model_construct(source=source),
    )


def test_example_names_are_unique() -> None:
    names = Counter(e.name for e in EXAMPLES)
    assert [n for n, k in names.items() if k > 1] == []


def _validate(tmp_path: Path, example: Example, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / f"{example.name}.yaml"
    path.write_text(yaml.safe_dump(example.job, sort_keys=False))
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    # A job without cpu/memory is warned about (test_worker_requests): not these tests' matter.
    return code, out, [line for line in err.splitlines() if not line.startswith(WARNING)]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e.name}-{e.case.field}")
def test_validate_refuses_and_accepts_as_the_rule_does(
    example: Example, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, lines = _validate(tmp_path, example, capsys)
    if not example.refused:
        assert (code, out.strip(), lines) == (0, "valid", [])
        return
    assert code == 2, out
    expected = example.expected()
    assert {line.split(": ", 1)[0] for line in lines} == {path for path, _ in expected}, lines
    assert len(lines) == len(expected), lines
    if example.case.same_words:
        assert f"{example.case.field}: {example.case.message}" in lines
