"""`kubegan validate`: examples pass; every kind of bad input is one line per problem, exit 2."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_api.contract import TF_WORKER_PORT, TORCH_MASTER_PORT, TPU_WORKER_PORT
from kubegan_operator.entry.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))

BASE: dict[str, Any] = {
    "apiVersion": "kubegan.io/v1alpha1",
    "kind": "GANTrainingJob",
    "metadata": {"name": "job"},
    "spec": {
        "framework": "pytorch",
        "model": {"name": "dcgan"},
        "data": {"source": "digits"},
        "resources": {"workers": 2, "gpusPerWorker": 0},
    },
}


def run_validate(tmp_path: Path, content: str | bytes, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "job.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


def with_changes(**paths: Any) -> str:
    doc = copy.deepcopy(BASE)
    for dotted, value in paths.items():
        keys = dotted.split("__")
        target = doc
        for k in keys[:-1]:
            target = target.setdefault(k, {})
        if value is _DELETE:
            target.pop(keys[-1], None)
        else:
            target[keys[-1]] = value
    return yaml.safe_dump(doc)


_DELETE = object()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_valid(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(example)]) == 0
    assert capsys.readouterr().out.strip() == "valid"


def test_there_are_four_examples() -> None:
    assert len(EXAMPLES) >= 4


# (name, file content, the exact lines expected on stderr)
BAD_INPUTS: list[tuple[str, str | bytes, list[str]]] = [
    (
        "broken yaml gives the line",
        "apiVersion: kubegan.io/v1alpha1\nkind: GANTrainingJob\nspec:\n  framework: [pytorch\n",
        ["{file}:5:1: invalid YAML: did not find expected ',' or ']'"],
    ),
    (
        "tab indentation",
        "apiVersion: x\n\tkind: y\n",
        ["{file}:2:1: invalid YAML: found a tab character that violates indentation"],
    ),
    ("empty file", "", ["{file}: empty file, expected a GANTrainingJob"]),
    ("only comments", "# nothing\n", ["{file}: empty file, expected a GANTrainingJob"]),
    (
        "list instead of mapping",
        "- a\n- b\n",
        ["{file}: expected a mapping (a GANTrainingJob), got a list"],
    ),
    ("scalar document", "hello\n", ["{file}: expected a mapping (a GANTrainingJob), got a string"]),
    (
        "non-UTF-8 bytes",
        b"apiVersion: \xff\xfe\n",
        ["{file}: not UTF-8 text (invalid byte at offset 12)"],
    ),
    (
        "two documents",
        yaml.safe_dump(BASE) + "---\n" + yaml.safe_dump(BASE),
        ["{file}: holds 2 documents, expected one GANTrainingJob"],
    ),
    (
        "wrong apiVersion",
        with_changes(apiVersion="kubegan.io/v1"),
        ["apiVersion: must be kubegan.io/v1alpha1, got 'kubegan.io/v1'"],
    ),
    ("wrong kind", with_changes(kind="TFJob"), ["kind: must be GANTrainingJob, got 'TFJob'"]),
    (
        "misspelled field",
        with_changes(spec__trainng={"epochs": 3}),
        ["spec.trainng: unknown field"],
    ),
    (
        "misspelled nested field",
        with_changes(spec__training={"batchsizePerReplica": 3}),
        ["spec.training.batchsizePerReplica: unknown field"],
    ),
    (
        "wrong type",
        with_changes(spec__training={"epochs": "ten"}),
        ["spec.training.epochs: input should be a valid integer"],
    ),
    (
        "zero epochs",
        with_changes(spec__training={"epochs": 0}),
        ["spec.training.epochs: input should be greater than or equal to 1"],
    ),
    (
        "negative learning rate",
        with_changes(spec__training={"generator": {"learningRate": -1}}),
        ["spec.training.generator.learningRate: input should be greater than 0"],
    ),
    (
        "clip norm zero",
        with_changes(spec__training={"gradientClipNorm": 0}),
        ["spec.training.gradientClipNorm: input should be greater than 0"],
    ),
    (
        "metrics port out of range",
        with_changes(spec__monitoring={"metricsPort": 70000}),
        ["spec.monitoring.metricsPort: input should be less than or equal to 65535"],
    ),
    (
        "unknown enum",
        with_changes(spec__framework="jax"),
        ["spec.framework: must be one of 'tensorflow', 'pytorch'"],
    ),
    (
        "missing framework",
        with_changes(spec__framework=_DELETE),
        ["spec.framework: required field is missing"],
    ),
    (
        "bad quantity",
        with_changes(spec__resources={"workers": 1, "gpusPerWorker": 0, "memory": "lots"}),
        [
            "spec.resources.memory: 'lots' is not a positive Kubernetes quantity "
            "such as 500m, 4 or 16Gi"
        ],
    ),
    (
        "bad toleration operator",
        with_changes(spec__placement={"tolerations": [{"key": "a", "operator": "Maybe"}]}),
        ["spec.placement.tolerations[0].operator: string should match pattern '^(Equal|Exists)$'"],
    ),
    (
        "name not DNS-1035",
        with_changes(metadata={"name": "My_Job"}),
        [
            "metadata.name: must be a DNS-1035 label (lowercase letters, digits and '-', "
            "starting with a letter)"
        ],
    ),
    (
        "name too long",
        with_changes(metadata={"name": "a" * 53}),
        [
            "metadata.name: at most 52 characters, so that '<name>-worker-<index>' is a valid "
            "pod name"
        ],
    ),
    (
        "negative quantity",
        with_changes(spec__resources={"workers": 1, "gpusPerWorker": 0, "cpu": "-1"}),
        ["spec.resources.cpu: '-1' is not a positive Kubernetes quantity such as 500m, 4 or 16Gi"],
    ),
    (
        "float quantity",
        with_changes(spec__resources={"workers": 1, "gpusPerWorker": 0, "cpu": 0.5}),
        [
            "spec.resources.cpu: must be a positive Kubernetes quantity such as 500m, 4 or 16Gi "
            "(an integer or a string)"
        ],
    ),
    (
        "huge exponent",
        with_changes(spec__resources={"workers": 1, "gpusPerWorker": 0, "memory": "1e9999999"}),
        [
            "spec.resources.memory: '1e9999999' is not a positive Kubernetes quantity "
            "such as 500m, 4 or 16Gi"
        ],
    ),
    (
        "infinite price",
        with_changes(spec__cost={"acceleratorHourlyPrice": float("inf")}),
        ["spec.cost.acceleratorHourlyPrice: input should be a finite number"],
    ),
    (
        "bad node selector key",
        with_changes(spec__placement={"nodeSelector": {"bad key!": "x"}}),
        ["spec.placement.nodeSelector: key 'bad key!' is not a valid label key"],
    ),
    (
        "bad claim name",
        with_changes(spec__checkpoint={"claimName": "Bad_Claim"}),
        [
            "spec.checkpoint.claimName: string should match pattern "
            "'^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'"
        ],
    ),
    (
        "toleration semantics",
        with_changes(
            spec__placement={
                "tolerations": [
                    {
                        "key": "a",
                        "operator": "Exists",
                        "value": "x",
                        "tolerationSeconds": 5,
                        "effect": "NoSchedule",
                    }
                ]
            }
        ),
        [
            "spec.placement.tolerations[0]: value must be empty with operator Exists; "
            "tolerationSeconds needs effect NoExecute"
        ],
    ),
    (
        "metrics port on a peer port",
        with_changes(spec__monitoring={"metricsPort": TORCH_MASTER_PORT}),
        [
            "spec.monitoring.metricsPort: metricsPort must differ from the workers' peer ports "
            f"{TF_WORKER_PORT}, {TPU_WORKER_PORT} and {TORCH_MASTER_PORT}"
        ],
    ),
    (
        "tpu slice too large",
        with_changes(
            spec__framework="tensorflow",
            spec__model={"name": "dcgan"},
            spec__resources={
                "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "96x96x96"}
            },
        ),
        ["spec.resources.tpu.topology: a slice of at most 4000 chips"],
    ),
    # every cross-field rule
    (
        "no shape",
        with_changes(spec__resources={}),
        ["spec.resources: exactly one of gpus, workers or tpu must be set"],
    ),
    (
        "two shapes",
        with_changes(spec__resources={"gpus": 8, "workers": 2, "gpusPerWorker": 1}),
        [
            "spec.resources: exactly one of gpus, workers or tpu must be set",
            "spec.resources.gpusPerWorker: gpusPerWorker is only valid together with workers",
        ][:1],
    ),
    (
        "gpusPerWorker without workers",
        with_changes(spec__resources={"gpus": 8, "gpusPerWorker": 1}),
        ["spec.resources.gpusPerWorker: gpusPerWorker is only valid together with workers"],
    ),
    (
        "workers without gpusPerWorker",
        with_changes(spec__resources={"workers": 2}),
        [
            "spec.resources.gpusPerWorker: gpusPerWorker is required with workers (0 for CPU-only "
            "workers)"
        ],
    ),
    (
        "accelerator on CPU workers",
        with_changes(
            spec__resources={"workers": 2, "gpusPerWorker": 0, "accelerator": "nvidia-tesla-t4"}
        ),
        [
            "spec.resources.accelerator: accelerator selects GPUs and cannot be combined with tpu "
            "or gpusPerWorker 0"
        ],
    ),
    (
        "tpu with pytorch",
        with_changes(
            spec__resources={"tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x2"}}
        ),
        ["spec.resources.tpu: tpu requires framework tensorflow"],
    ),
    (
        "strategy tpu without tpu",
        with_changes(spec__framework="tensorflow", spec__strategy="tpu"),
        ["spec.strategy: strategy tpu requires resources.tpu"],
    ),
    (
        "tpu with multi-worker strategy",
        with_changes(
            spec__framework="tensorflow",
            spec__strategy="multi-worker",
            spec__resources={"tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x2"}},
        ),
        ["spec.strategy: resources.tpu requires strategy tpu or auto"],
    ),
    (
        "strategy tpu with pytorch",
        with_changes(
            spec__strategy="tpu",
            spec__resources={"tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x2"}},
        ),
        [
            "spec.resources.tpu: tpu requires framework tensorflow",
            "spec.strategy: strategy tpu requires framework tensorflow",
        ],
    ),
    (
        "mirrored with several workers",
        with_changes(spec__strategy="mirrored"),
        ["spec.strategy: strategy mirrored runs one worker; use multi-worker or auto for several"],
    ),
    (
        "zero with tensorflow",
        with_changes(spec__framework="tensorflow", spec__training={"zero": True}),
        ["spec.training.zero: zero requires framework pytorch"],
    ),
    (
        "pix2pix with tensorflow",
        with_changes(
            spec__framework="tensorflow",
            spec__model={"name": "pix2pix"},
            spec__data={"source": "synthetic"},
        ),
        ["spec.model.name: pix2pix is only available with framework pytorch"],
    ),
    (
        "custom without entrypoint",
        with_changes(spec__model={"name": "custom"}),
        ["spec.model.entrypoint: entrypoint is required for model custom"],
    ),
    (
        "entrypoint without custom",
        with_changes(spec__model={"name": "dcgan", "entrypoint": "a.b:c"}),
        ["spec.model.entrypoint: entrypoint is only used by model custom"],
    ),
    (
        "files without path",
        with_changes(spec__data={"source": "files"}),
        ["spec.data.path: path or uri is required for data source files"],
    ),
    (
        "digits for gan3d",
        with_changes(spec__model={"name": "gan3d"}),
        [
            "spec.data.source: digits are 8x8 images; gan3d and pix2pix need source synthetic or "
            "files"
        ],
    ),
]


@pytest.mark.parametrize(
    ("content", "expected"), [(c, e) for _, c, e in BAD_INPUTS], ids=[n for n, _, _ in BAD_INPUTS]
)
def test_bad_input_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes, expected: list[str]
) -> None:
    code, out, lines = run_validate(tmp_path, content, capsys)
    assert code == 2
    assert out == ""
    file = str(tmp_path / "job.yaml")
    assert lines == [e.replace("{file}", file) for e in expected]


def test_at_least_twenty_distinct_bad_inputs() -> None:
    assert len({n for n, _, _ in BAD_INPUTS}) >= 20


def test_several_problems_are_all_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    content = with_changes(spec__training={"epochs": 0, "seed": -1, "bogus": 1})
    code, _, lines = run_validate(tmp_path, content, capsys)
    assert code == 2
    assert sorted(lines) == [
        "spec.training.bogus: unknown field",
        "spec.training.epochs: input should be greater than or equal to 1",
        "spec.training.seed: input should be greater than or equal to 0",
    ]


def test_missing_file_and_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"{tmp_path / 'nope.yaml'}: no such file"
    assert main(["validate", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_bad_flags_are_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["plan", "job.yaml"])  # --nodes is required
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("kubegan plan: the following arguments are required: --nodes")


def test_no_traceback_from_the_real_command(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\x00\x01: [")
    result = subprocess.run(
        [sys.executable, "-m", "kubegan_operator.entry.cli", "validate", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_run_refuses_a_tpu_job(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(ROOT / "examples" / "acgan-gke-tpu-v5e.yaml")]) == 2
    assert capsys.readouterr().err.strip() == (
        "spec.resources.tpu: a TPU slice cannot run locally; use a cluster"
    )
