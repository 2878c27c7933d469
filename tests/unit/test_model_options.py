"""`spec.model.options`: a value `kubegan validate` accepts never crashes a worker.

Every built-in model's options are declared once (kubegan_api.model_options). These
tests draw option values of every wrong type, out of every range and within range, and
check that `kubegan validate`, the trainer's start (its config load) and the operator's
status say the same thing, one line per bad option naming it, and that the CRD's schema and
CEL rules (generated from the same table) refuse no more than they do. That accepted
options really build and train is the trainer tier's test (tests/trainer/test_model_options).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubegan_api.contract import EXIT_USER_ERROR
from kubegan_api.model_options import MODELS, Kind, Option, option_problems
from kubegan_operator.api.crd import declared_options, spec_schema
from kubegan_operator.api.input_files import InputError
from kubegan_operator.api.loading import job_from_object
from kubegan_operator.decide.reconcile import reconcile
from kubegan_operator.decide.snapshot import JobSnapshot
from kubegan_operator.entry.cli import main
from kubegan_trainer.__main__ import load_config
from kubegan_trainer.base.errors import TrainerError

ROOT = Path(__file__).resolve().parents[2]
INT64 = 2**63 - 1
BUILT_IN = [m for m, table in MODELS.items() if not table.open]
SOURCE = {"gan3d": "synthetic", "pix2pix": "synthetic"}  # the others train on digits
ENTRYPOINT = "tests.trainer.tinymodels:module_pair"


# ---- values of every kind -------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-INT64 - 1, INT64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


# Which JSON types an option's kind takes at all (a number takes integers too).
TYPES = {
    Kind.integer: {"integer"},
    Kind.number: {"integer", "number"},
    Kind.string: {"string"},
    Kind.numbers: {"array"},
    Kind.auto_or_bool: {"boolean", "string"},
}


def wrong_type(option: Option) -> st.SearchStrategy[Any]:
    """Any JSON value of a type the option never takes (null means unset: not drawn)."""
    return json_values.filter(lambda v: v is not None and _json_type(v) not in TYPES[option.kind])


def _outside_integers(option: Option) -> st.SearchStrategy[Any]:
    if option.choices:  # powers of two, channels 1 | 3: the integers around them too
        near = st.integers(min(option.choices) - 8, max(option.choices) + 8)
        return (near | st.integers(-INT64 - 1, INT64)).filter(lambda v: v not in option.choices)
    lo, hi = int(option.minimum or 0), int(option.maximum or 0)
    return st.integers(-INT64 - 1, lo - 1) | st.integers(hi + 1, INT64)


def out_of_range(option: Option) -> st.SearchStrategy[Any]:
    """A value of a type the option takes, outside what the option allows."""
    lo, hi = option.minimum, option.maximum
    if option.kind is Kind.integer:
        return _outside_integers(option)
    if option.kind is Kind.number:
        return st.floats(max_value=lo, exclude_max=True, allow_infinity=False) | st.floats(
            min_value=hi, exclude_min=True, allow_infinity=False
        )
    if option.kind is Kind.string and option.choices:
        return st.text(max_size=10).filter(lambda v: v not in option.choices)
    if option.kind is Kind.string:
        too_long = st.integers(int(hi or 0) + 1, int(hi or 0) + 40).map(lambda n: "k" * n)
        return too_long | st.just("") if lo else too_long
    if option.kind is Kind.numbers:
        good = st.floats(lo, hi)
        bad_item = st.floats(max_value=lo, exclude_max=True) | st.floats(
            min_value=hi, exclude_min=True
        )
        n = option.length
        wrong_length = st.lists(good, max_size=8).filter(lambda v: len(v) != n)
        one_bad = st.tuples(st.lists(good, min_size=n - 1, max_size=n - 1), bad_item).map(
            lambda t: [*t[0], t[1]]
        )
        return wrong_length | one_bad.filter(lambda v: all(map(math.isfinite, v)))
    return st.text(max_size=10).filter(lambda v: v != "auto")  # auto, true or false


def in_range(option: Option) -> st.SearchStrategy[Any]:
    if option.choices:
        return st.sampled_from(option.choices)
    lo, hi = option.minimum, option.maximum
    if option.kind is Kind.integer:
        return st.integers(int(lo or 0), int(hi or 0))
    if option.kind is Kind.number:
        return st.floats(lo, hi) | st.integers(math.ceil(lo or 0), math.floor(hi or 0))
    if option.kind is Kind.string:
        return st.text(min_size=int(lo or 0), max_size=min(int(hi or 0), 30))
    if option.kind is Kind.numbers:
        item = st.floats(lo, hi) | st.integers(math.ceil(lo or 0), math.floor(hi or 0))
        return st.lists(item, min_size=option.length, max_size=option.length)
    return st.sampled_from(["auto", True, False])


@st.composite
def drawn_options(draw: st.DrawFn, model: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Options for `model` and what each drawn value is: good, wrong type, out of range, or
    an unknown name (another model's option or any name)."""
    table = MODELS[model]
    options: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    for option in draw(st.lists(st.sampled_from(table.options), max_size=4, unique=True)):
        kind = draw(st.sampled_from(["good", "good", "type", "range"]))
        strategy = {"good": in_range, "type": wrong_type, "range": out_of_range}[kind]
        options[option.name] = draw(strategy(option))
        kinds[option.name] = kind
    others = sorted({o.name for t in MODELS.values() for o in t.options} - set(table.names()))
    for name in draw(
        st.lists(st.sampled_from(others) | st.from_regex(r"\Az[A-Za-z]{0,8}\Z"), max_size=2)
    ):
        options[name] = draw(json_values.filter(lambda v: v is not None))  # null is unset
        kinds[name] = "unknown"
    return options, kinds


# ---- the three readers: validate, the trainer's start, the operator's status ----------------


def job(model: str, options: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {"name": "opts", "namespace": "ns"},
        "spec": {
            "framework": "pytorch",
            "model": {
                "name": model,
                "options": options,
                **({"entrypoint": ENTRYPOINT} if model == "custom" else {}),
            },
            "data": {"source": SOURCE.get(model, "digits")},
            # Named requests: these tests are about options, not the BestEffort warning.
            "resources": {"workers": 1, "gpusPerWorker": 0, "cpu": "1", "memory": "2Gi"},
        },
    }


def validate_lines(model: str, options: dict[str, Any]) -> list[str]:
    """What `kubegan validate` prints for the job (the same code path, without the YAML)."""
    try:
        job_from_object(job(model, options), "job.yaml")
    except InputError as err:
        return err.problems
    return []


def trainer_message(model: str, options: dict[str, Any]) -> str | None:
    """What the trainer says when its config file holds these options (None: it starts)."""
    spec = job(model, options)["spec"]
    config = {
        "jobName": "opts",
        "framework": "pytorch",
        "model": spec["model"],
        "data": spec["data"],
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(config))
        try:
            load_config(str(path))
        except TrainerError as err:
            return str(err)
    return None


def status_message(model: str, options: dict[str, Any]) -> str:
    """The message of the operator's Failed condition for a job the apiserver let through
    (a CRD older than the operator, or an option its schema cannot see)."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    seen = JobSnapshot(
        job(model, options), (), {}, now, have_service=False, have_config_map=False, plan=_no_plan
    )
    d = reconcile(seen)
    assert d.status is not None and d.status["phase"] == "Failed"
    (condition,) = [c for c in d.status["conditions"] if c["type"] == "Failed"]
    assert condition["reason"] == "InvalidSpec"
    return condition["message"]


def _no_plan(spec: Any) -> Any:
    raise AssertionError("an invalid job is never planned")


def _path(line: str) -> str:
    return line.split(": ", 1)[0].removeprefix("spec.model.options.")


@pytest.mark.parametrize("model", list(MODELS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_validate_and_the_trainer_agree(model: str, data: st.DataObject) -> None:
    options, kinds = data.draw(drawn_options(model))
    lines = validate_lines(model, options)
    message = trainer_message(model, options)
    # Both refuse with the same lines, or both accept.
    assert message == ("; ".join(lines) if lines else None)
    refused = {_path(line): line for line in lines}
    for name, kind in kinds.items():
        if kind in ("type", "range"):
            option = MODELS[model].get(name)
            assert option is not None
            assert refused.get(name) == f"spec.model.options.{name}: {option.rule}", (name, lines)
        elif kind == "unknown" and not MODELS[model].open:
            assert f": unknown option for model {model}; known: " in refused[name], (name, lines)
    if not any(
        k in ("type", "range") or (k == "unknown" and model != "custom") for k in kinds.values()
    ):
        # Only good values: what is left are rules between options (widths x image size,
        # the PatchGAN's depth, synthetic data in memory), each naming one of them.
        for name, line in refused.items():
            assert name in ("ngf", "ndf", "nLayersD", "numSamples"), line
            assert line != f"spec.model.options.{name}: {MODELS[model].get(name).rule}"  # type: ignore[union-attr]


@settings(max_examples=25, deadline=None)
@given(data=st.data(), model=st.sampled_from(list(MODELS)))
def test_the_operator_status_says_what_validate_says(data: st.DataObject, model: str) -> None:
    options, _ = data.draw(drawn_options(model))
    lines = validate_lines(model, options)
    if lines:
        assert status_message(model, options) == "; ".join(lines)


# ---- the messages -----------------------------------------------------------------------------


def validate(tmp_path: Path, model: str, options: dict[str, Any], capsys) -> tuple[int, list[str]]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job(model, options), sort_keys=False))
    code = main(["validate", str(path)])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(
    ("model", "options", "line"),
    [
        ("dcgan", {"latentDim": "100"}, "latentDim: must be an integer from 1 to 1024"),
        ("dcgan", {"latentDim": 100.0}, "latentDim: must be an integer from 1 to 1024"),
        ("acgan", {"ngf": True}, "ngf: must be an integer from 1 to 1024"),
        ("acgan", {"ndf": -4}, "ndf: must be an integer from 1 to 1024"),
        ("dcgan", {"imageSize": 48}, "imageSize: must be a power of two from 8 to 256"),
        ("dcgan", {"channels": 2}, "channels: must be one of 1, 3"),
        ("dcgan", {"latentDim": 10**12}, "latentDim: must be an integer from 1 to 1024"),
        ("gan3d", {"latentDim": 2}, "latentDim: must be an integer from 3 to 1024"),
        (
            "gan3d",
            {"lossWeights": [3, 0.1, 25]},
            "lossWeights: must be a list of 4 numbers, each from 0 to 1000",
        ),
        ("gan3d", {"size": "huge"}, "size: must be one of full, tiny"),
        ("gan3d", {"labelFlip": 2}, "labelFlip: must be a number from 0 to 0.5"),
        ("pix2pix", {"direction": "AB"}, "direction: must be one of AtoB, BtoA"),
        ("pix2pix", {"channelsLast": "yes"}, "channelsLast: must be auto, true or false"),
        ("pix2pix", {"imageSize": 16}, "nLayersD: 3 layers need imageSize >= 32, got 16"),
        (
            "dcgan",
            {"imageSize": 256, "ngf": 128},
            "ngf: at most 64 with imageSize 256 (the widest layer has ngf x imageSize/8 "
            "channels, at most 2048)",
        ),
        (
            "gan3d",
            {"numSamples": 100_000},
            "numSamples: at most 8255 51x51x25 showers (synthetic data is held in memory: at "
            "most 2 GiB)",
        ),
        (
            "gan3d",
            {"imageSize": 32},
            "imageSize: unknown option for model gan3d; known: angleKey, channelsLast, "
            "labelFlip, latentDim, lossWeights, numSamples, power, size",
        ),
        ("custom", {"dataKind": "video"}, "dataKind: must be one of images, paired, showers"),
        ("custom", {"numSamples": "many"}, "numSamples: must be an integer from 1 to 1000000"),
    ],
)
def test_one_line_per_bad_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str, options: dict, line: str
) -> None:
    assert validate(tmp_path, model, options, capsys) == (2, [f"spec.model.options.{line}"])


def test_every_problem_is_its_own_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = validate(tmp_path, "dcgan", {"ngf": "64", "latentDim": -1, "zoom": 2}, capsys)
    assert code == 2
    assert [_path(line) for line in lines] == ["ngf", "latentDim", "zoom"]


def test_a_custom_models_own_options_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = {"hidden": [1, 2], "ngf": "wide", "size": 3, "imageSize": 16, "latentDim": 8}
    assert validate(tmp_path, "custom", options, capsys) == (0, [])
    assert option_problems("custom", options) == []


def test_an_odd_option_name_stays_on_one_line() -> None:
    problems = option_problems("dcgan", {"a\nb": 1, "x" * 200: 2})
    assert [name for name, _ in problems] == [repr("a\nb"), repr("x" * 80)]
    assert all("\n" not in name for name, _ in problems)


def test_null_is_unset() -> None:
    # As the apiserver prunes a declared field's null, whatever the model.
    assert option_problems("dcgan", {"ngf": None, "channels": None, "angleKey": None}) == []


def test_the_defaults_and_the_examples_are_accepted() -> None:
    for model in MODELS:
        assert option_problems(model, {}) == [], model
    for example in sorted((ROOT / "examples").glob("*.yaml")):
        assert main(["validate", str(example)]) == 0, example.name


def test_kubegan_run_refuses_a_bad_option_in_one_line(tmp_path: Path) -> None:
    """A job like the demo with a bad option: `kubegan run` stops before any worker starts
    (it used to start them, and they died with exit 1 and a traceback)."""
    text = (ROOT / "examples" / "digits-local.yaml").read_text()
    assert "options: {imageSize: 16, ngf: 16," in text
    bad = tmp_path / "job.yaml"
    bad.write_text(
        text.replace("options: {imageSize: 16, ngf: 16,", 'options: {imageSize: 16, ngf: "8",')
    )
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "kubegan_operator.entry.cli", "run", str(bad), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == EXIT_USER_ERROR, result.stderr
    assert result.stderr.splitlines() == [
        "spec.model.options.ngf: must be an integer from 1 to 1024"
    ]
    assert "Traceback" not in result.stderr + result.stdout
    assert not out.exists()


# ---- the CRD: its schema and CEL refuse nothing validate accepts, and catch what they can ----


def _schema_accepts(node: dict[str, Any], value: Any) -> bool:
    """The apiserver's checks of a declared option's schema (type, enum, bounds)."""
    kind = _json_type(value)
    if not (kind == node["type"] or (node["type"] == "number" and kind == "integer")):
        return False
    if "enum" in node:
        return value in node["enum"]
    size = len(value) if isinstance(value, str) else value
    low = node.get("minimum", node.get("minLength"))
    high = node.get("maximum", node.get("maxLength"))
    return (low is None or size >= low) and (high is None or size <= high)


def _cel_to_python(rule: str) -> str:
    """The generated CEL (has, in, comparisons, ||, &&, !) as a Python expression."""
    py = re.sub(r"!has\(self\.options\.(\w+)\)", r"('\1' not in options)", rule)
    py = re.sub(r"self\.options\.(\w+)\.size\(\)", r"len(options['\1'])", py)
    py = re.sub(r"self\.options\.(\w+)", r"options['\1']", py)
    py = py.replace("self.name", "name").replace("||", " or ").replace("&&", " and ")
    return py.replace("!(", "not (")


@cache
def _crd_model() -> dict[str, Any]:
    return spec_schema()["properties"]["model"]


def crd_refuses(model: str, options: dict[str, Any]) -> dict[str, str]:
    """Declared option -> why the apiserver refuses it ("schema", or the CEL rule's message)
    in a spec.model with these options. A field that fails its schema is not given to CEL."""
    props = _crd_model()["properties"]["options"]["properties"]
    present = {k: v for k, v in options.items() if v is not None}  # nulls are pruned
    refused = {
        k: "schema" for k, v in present.items() if k in props and not _schema_accepts(props[k], v)
    }
    env = {"name": model, "options": present}
    for rule in _crd_model()["x-kubernetes-validations"]:
        name = rule["fieldPath"].removeprefix(".options.")
        if name not in refused and not eval(_cel_to_python(rule["rule"]), {}, env):
            refused[name] = rule["message"]
    return refused


@pytest.mark.parametrize("model", list(MODELS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_crd_refuses_a_declared_option_when_validate_does(
    model: str, data: st.DataObject
) -> None:
    options, _ = data.draw(drawn_options(model))
    declared = declared_options()
    options = {k: v for k, v in options.items() if k in declared}
    python = {
        name: reason
        for name, reason in option_problems(model, options)
        if reason.startswith("must be") or reason.startswith("unknown option")
    }
    crd = crd_refuses(model, options)
    assert set(crd) == set(python), (options, crd, python)
    for name, reason in crd.items():  # CEL says it in validate's words
        assert reason in ("schema", python[name])


def test_docs_show_the_option_tables() -> None:
    from kubegan_api.model_options import options_markdown

    text = (ROOT / "docs" / "api.md").read_text()
    start = "<!-- model-options: generated by kubegan_api.model_options.options_markdown() -->\n"
    section = text.split(start, 1)[1].split("<!-- /model-options -->", 1)[0]
    assert section == options_markdown(), "paste options_markdown() into docs/api.md"
