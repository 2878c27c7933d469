"""The custom model API (kubegan_trainer.worker.model_api, docs/custom-models.md) in PyTorch: the
guide's model, as shipped in examples/, trains with two workers and every training option,
stops on SIGTERM and resumes bitwise; a factory that breaks the API is refused at start
with one line naming what is wrong (exit 2, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_api.contract import EXIT_USER_ERROR
from kubegan_trainer.backends.torch.models.custom import build_custom
from kubegan_trainer.base.errors import TrainerError

from tests.trainer.util import (
    EVERY_TRAINING_OPTION,
    REPO,
    assert_states_equal,
    config,
    run_workers,
    straight_and_resumed,
)

GUIDE_MODEL = "kubegan_examples.tiny_gan:build"
TINY = {"imageSize": 8, "latentDim": 8}
# The acceptance's options: EMA, R1, DiffAugment, and a cosine schedule (the generator's).
OPTIONS = {**EVERY_TRAINING_OPTION, "batchSizePerReplica": 4}
assert OPTIONS["generator"]["schedule"] == "cosine"


@pytest.mark.timeout(480)
def test_the_guides_model_trains_with_every_option_and_resumes_bitwise(tmp_path: Path) -> None:
    cfg = config(
        "custom", entrypoint=GUIDE_MODEL, options=TINY, epochs=2, stepsPerEpoch=3, **OPTIONS
    )
    straight, resumed = straight_and_resumed(cfg, tmp_path)
    a, b = straight.checkpoint_state(), resumed.checkpoint_state()
    assert "generator_ema" in a and "augment_rng" in a["ranks"][1]
    assert a["training_options"]["r1_count"] == 6  # one real-data D update a step
    assert_states_equal(a, b)
    # The model's own quality score is measured each epoch, beside the digits' scores.
    lines = (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 2
    for r in records:
        assert {"mean_image_gap", "feature_distance"} <= set(r["quality"]), r


HOSTILE = {
    "raises_at_build": "raised ValueError: no such layer size: -3",
    "no_api_version": "without api_version (declare api_version = 1",
    "future_api_version": "declares model API 2, but this trainer runs model API 1",
    "no_phases": "schedule has no phases",
    "no_generator_phase": "schedule never trains the generator",
    "unknown_loss": "loss 'g_loss_v2' is not a method of the task",
    "schedule_is_a_list": "schedule is a list, not a Schedule",
    "generator_not_a_module": "generator is a function, not a torch.nn.Module",
    "pair_of_wrong_types": "returned tuple; expected a GanTask (model API 1) or a (generator,",
    "quality_without_primary": "quality() but no quality_primary = (name, higher_is_better)",
}


@pytest.mark.parametrize("factory", sorted(HOSTILE))
def test_a_factory_that_breaks_the_api_is_one_line(factory: str) -> None:
    entrypoint = f"tests.trainer.hostile_models:{factory}"
    with pytest.raises(TrainerError) as err:
        build_custom(entrypoint, TINY)
    line = str(err.value)
    assert line.startswith(f"spec.model.entrypoint: {entrypoint} "), line
    assert HOSTILE[factory] in line and "\n" not in line


def _error_line(log: str) -> str:
    lines = [ln for ln in log.splitlines() if ln.startswith("kubegan-trainer: error:")]
    assert len(lines) == 1 and "Traceback" not in log, log
    return lines[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("factory", "words"),
    [
        ("raises_at_build", "raised ValueError: no such layer size: -3"),
        ("no_phases", "schedule has no phases"),
        ("wrong_data_kind", "spec.model.name: custom trains on paired data"),
    ],
)
def test_the_trainer_refuses_a_broken_model_at_start(
    factory: str, words: str, tmp_path: Path
) -> None:
    cfg = config("custom", entrypoint=f"tests.trainer.hostile_models:{factory}", options=TINY)
    res = run_workers(cfg, tmp_path / "out")
    assert res.codes == [EXIT_USER_ERROR], res.logs[0]
    assert words in _error_line(res.logs[0])


def _validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entrypoint: str, options: dict[str, Any]
) -> tuple[int, str, str]:
    """`kubegan validate` on the guide's job with another model; (exit code, out, err)."""
    from kubegan_operator.entry.cli import main

    job = yaml.safe_load((REPO / "examples/models/tiny-gan.yaml").read_text())
    job["spec"]["model"].update(entrypoint=entrypoint, options=options)
    job["spec"]["resources"].update(cpu="1", memory="1Gi")  # no BestEffort warning
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    code = main(["validate", "--check-model", str(path)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_validate_builds_the_guides_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _validate(tmp_path, capsys, GUIDE_MODEL, TINY) == (0, "valid\n", "")


@pytest.mark.parametrize(
    ("entrypoint", "options", "words"),
    [
        ("tests.trainer.hostile_models:raises_at_build", TINY, "raised ValueError: no such"),
        ("tests.trainer.hostile_models:no_generator_phase", TINY, "never trains the generator"),
        ("tests.trainer.hostile_models:future_api_version", TINY, "declares model API 2"),
        ("tests.trainer.hostile_entrypoints:not_a_model", TINY, "returned str; expected"),
        (GUIDE_MODEL, {**TINY, "dataKind": "paired"}, "trains on images data, but spec.model"),
        ("kubegan_examples.tiny_gan:no_such_factory", TINY, "has no 'no_such_factory'"),
    ],
)
def test_validate_refuses_a_broken_model_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    entrypoint: str,
    options: dict[str, Any],
    words: str,
) -> None:
    code, out, err = _validate(tmp_path, capsys, entrypoint, options)
    assert code == EXIT_USER_ERROR and out == ""
    (line,) = err.strip().splitlines()
    module = entrypoint.split(":")[0]
    assert line.startswith(f"spec.model.entrypoint: {module}") and words in line, line
