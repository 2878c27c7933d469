"""Hostile and careless input to the CLI and the planner. One test per class
of problem; each failed on the code before the fix (a hang, a traceback, a wrong answer or a
silent acceptance) and gives one line and a non-zero exit now."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_api.contract import ENV_COST_RATE_PER_HOUR
from kubegan_operator.api.input_files import LIST_LIMITS, InputError, read_text
from kubegan_operator.api.loading import load_prices
from kubegan_operator.entry.cli import main
from kubegan_operator.foundation.topology import build_inventory
from kubegan_operator.placement.planner import plan, static_plan

from tests.support.world import node, pod
from tests.unit.hostile import ALIAS_BOMB

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits-local.yaml"
DEMO_OPTIONS = "{imageSize: 16, ngf: 16, ndf: 16, latentDim: 64}"  # as the demo job writes them
GAN3D = ROOT / "examples" / "gan3d-gke-v100-spot.yaml"
TIMEOUT = 60  # a subprocess that has not answered by then hangs


def kubegan(*args: str, stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process: hangs show as timeouts, tracebacks on stderr."""
    return subprocess.run(
        [sys.executable, "-m", "kubegan_operator.entry.cli", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def job_text(**replace: str) -> str:
    text = DIGITS.read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return text


def validate_text(tmp_path: Path, text: str | bytes) -> tuple[int, list[str]]:
    path = tmp_path / "job.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    result = kubegan("validate", str(path))
    assert "Traceback" not in result.stderr
    # A job naming no cpu/memory is warned about (test_worker_requests): not this file's matter.
    lines = result.stderr.strip().splitlines()
    return result.returncode, [ln for ln in lines if not ln.startswith("kubegan validate: warn")]


def nodes_file(tmp_path: Path, items: list[dict[str, Any]], name: str = "nodes.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def v100(n: int = 4) -> list[dict[str, Any]]:
    return [node(f"n{i}", spot=True) for i in range(n)]


# ---- one input path: regular files, sizes, UTF-8 -------------------------------------------


@pytest.mark.parametrize("command", ["validate", "plan", "render", "run"])
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    args = [command, str(fifo)] + (["--nodes", str(GAN3D)] if command == "plan" else [])
    assert one_line(kubegan(*args)) == f"{fifo}: is a FIFO, not a regular file"


@pytest.mark.parametrize("flag", ["--nodes", "--pods", "--prices"])
def test_fifo_and_devices_as_node_pod_and_price_files(tmp_path: Path, flag: str) -> None:
    fifo = tmp_path / "in.yaml"
    os.mkfifo(fifo)
    nodes = nodes_file(tmp_path, v100())
    for bad, what in ((fifo, "a FIFO"), ("/dev/zero", "a character device")):
        args = ["plan", "--nodes", nodes, flag, str(bad), str(GAN3D)]
        if flag == "--nodes":
            args = ["plan", "--nodes", str(bad), str(GAN3D)]
        assert one_line(kubegan(*args)) == f"{bad}: is {what}, not a regular file"


def test_operator_prices_fifo_and_bad_yaml(tmp_path: Path) -> None:
    fifo = tmp_path / "prices.yaml"
    os.mkfifo(fifo)
    assert one_line(kubegan("operator", "--prices", str(fifo))).endswith("not a regular file")
    bad = tmp_path / "bad.yaml"
    bad.write_text("accelerators: [\n")
    assert one_line(kubegan("operator", "--prices", str(bad))).startswith(
        f"{bad}:2:1: invalid YAML:"
    )


@pytest.mark.parametrize("seconds", ["0", "-5", "nan", "inf", "1e9", "15s", ""])
def test_a_progress_interval_out_of_range_is_one_line(seconds: str) -> None:
    line = one_line(kubegan("operator", "--progress-interval", seconds))
    assert "--progress-interval" in line and "from 1 to 3600" in line


def test_size_bound(tmp_path: Path) -> None:
    big = tmp_path / "job.yaml"
    big.write_text("# padding\n" * 200_000)  # 2 MB of comments
    code, lines = validate_text(tmp_path, big.read_bytes())
    assert code == 2 and lines == [f"{big}: larger than 1 MiB, the limit for a job file"]
    assert LIST_LIMITS.max_bytes > 1 << 20  # node lists of real clusters are larger


def test_a_directory_and_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        read_text(tmp_path)
    with pytest.raises(InputError, match="no such file"):
        read_text(tmp_path / "nope.yaml")


# ---- YAML: aliases, duplicate keys, depth, JSON data only -----------------------------------


def test_alias_bomb_in_model_options_is_refused(tmp_path: Path) -> None:
    bomb = ALIAS_BOMB.replace("\n", "\n      ")
    code, lines = validate_text(
        tmp_path, job_text(**{"options: " + DEMO_OPTIONS: f"options:\n      {bomb}"})
    )
    assert code == 2 and len(lines) == 1
    assert "invalid YAML: aliases expand the document beyond" in lines[0]


def test_alias_bomb_in_a_small_node_list_and_a_price_table(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(ALIAS_BOMB + "items: []\n")
    assert len(nodes.read_bytes()) < 1024
    line = one_line(kubegan("plan", "--nodes", str(nodes), str(GAN3D)))
    assert "aliases expand the document beyond" in line
    prices = tmp_path / "prices.yaml"
    prices.write_text(ALIAS_BOMB + "accelerators: {}\n")
    line = one_line(
        kubegan(
            "plan", "--nodes", nodes_file(tmp_path, v100()), "--prices", str(prices), str(GAN3D)
        )
    )
    assert line.startswith(f"{prices}:") and "aliases expand" in line


def test_small_aliases_are_fine(tmp_path: Path) -> None:
    text = job_text(
        **{
            "generator: {optimizer: adam, learningRate: 0.001, beta1: 0.5}": (
                "generator: &opt {optimizer: adam, learningRate: 0.001, beta1: 0.5}"
            ),
            "discriminator: {optimizer: adam, learningRate: 0.00025, beta1: 0.5}": (
                "discriminator: *opt"
            ),
        }
    )
    assert validate_text(tmp_path, text) == (0, [])


def test_recursive_alias(tmp_path: Path) -> None:
    code, lines = validate_text(
        tmp_path, job_text(**{"options: " + DEMO_OPTIONS: "options: &o {a: *o}"})
    )
    assert code == 2 and len(lines) == 1 and "recursive alias *o" in lines[0]


def test_duplicate_keys_name_the_key_and_line(tmp_path: Path) -> None:
    code, lines = validate_text(tmp_path, job_text(**{"    seed: 1": "    seed: 1\n    seed: 8"}))
    assert code == 2
    assert lines == [
        f"{tmp_path / 'job.yaml'}:23:5: invalid YAML: duplicate key 'seed' (first on line 22)"
    ]


def test_options_300_deep_give_one_line(tmp_path: Path) -> None:
    deep = "{a: " * 300 + "1" + "}" * 300
    code, lines = validate_text(tmp_path, job_text(**{DEMO_OPTIONS: deep}))
    assert code == 2 and len(lines) == 1
    assert lines[0].endswith("invalid YAML: nested deeper than 100 levels")
    deep = "{a: " * 80 + "1" + "}" * 80  # within the file limit, beyond the options limit
    code, lines = validate_text(tmp_path, job_text(**{DEMO_OPTIONS: deep}))
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("spec.model.options: nested deeper than 64 levels")


@pytest.mark.parametrize(
    ("value", "expected"),
    [("!!binary aGk=", "binary data"), ("!!set {a}", "a set"), ("{1: 2}", "is not a string")],
)
def test_only_json_data(tmp_path: Path, value: str, expected: str) -> None:
    code, lines = validate_text(tmp_path, job_text(**{DEMO_OPTIONS: f"{{x: {value}}}"}))
    assert code == 2 and len(lines) == 1 and expected in lines[0]


def test_dates_stay_strings_as_kubectl_sends_them(tmp_path: Path) -> None:
    code, lines = validate_text(
        tmp_path, job_text(**{"imageSize: 16": "imageSize: 16, d: 2024-01-01"})
    )
    # The date is JSON data (a string); only its name is unknown to acgan.
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("spec.model.options.d: unknown option for model acgan; known: ")


# ---- validate refuses what the apiserver refuses --------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("workers: 2", "workers: true", "spec.resources.workers: input should be a valid integer"),
        ("epochs: 18", 'epochs: "5"', "spec.training.epochs: input should be a valid integer"),
        ("seed: 1", "seed: 1.5", "spec.training.seed: input should be a valid integer"),
        (
            "keep: 2",
            "keep: 2\n  runPolicy: {activeDeadlineSeconds: 99999999999999999999}",
            "spec.runPolicy.activeDeadlineSeconds: input should be less than or equal to "
            "9223372036854775807",
        ),
        (
            "imageSize: 16",
            "imageSize: 99999999999999999999",
            "spec.model.options: integer at imageSize is beyond int64",
        ),
        (
            "batchSizePerReplica: 32",
            "batch_size_per_replica: 32",
            "spec.training.batch_size_per_replica: unknown field",
        ),
        (
            "  name: digits-local",
            "  name: digits-local\n  labels: {'bad key!': x}",
            "metadata.labels: key 'bad key!' is not a valid label key",
        ),
        (
            "  name: digits-local",
            "  name: digits-local\n  labels: {app: 'two words'}",
            "metadata.labels: app: value 'two words' is not a valid label value",
        ),
        (
            "  name: digits-local",
            "  name: digits-local\n  labels: {app: 5}",
            "metadata.labels.app: input should be a valid string",
        ),
        (
            "  framework: pytorch",
            '  framework: pytorch\n  image: "my image\\nrm -rf /"',
            "spec.image: must be a container image reference",
        ),
    ],
)
def test_strict_types_as_the_crd_declares(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    code, lines = validate_text(tmp_path, job_text(**{old: new}))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(expected), lines


def test_the_crd_carries_the_same_limits() -> None:
    from kubegan_operator.api.crd import crd

    spec = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    props = spec["properties"]
    assert "pattern" in props["image"]
    tpu = props["resources"]["properties"]["tpu"]["properties"]
    assert "pattern" in tpu["topology"]
    deadline = props["runPolicy"]["properties"]["activeDeadlineSeconds"]
    assert deadline["format"] == "int64" and "maximum" not in deadline  # see crd.py


# ---- node and pod lists of odd shapes -------------------------------------------------------


def _odd(mutate: Any) -> list[dict[str, Any]]:
    items = v100()
    mutate(items[0])
    return items


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda n: n["metadata"].update(name=123), "item 0: metadata.name: expected a string"),
        (lambda n: n.update(spec="oops"), "node n0: spec: expected a mapping"),
        (
            lambda n: n["spec"].update(unschedulable="false"),
            "node n0: spec.unschedulable: input should be a valid boolean",
        ),
        (lambda n: n["metadata"].update(labels=["a"]), "node n0: metadata.labels: expected a"),
        (lambda n: n["status"].update(conditions="Ready"), "node n0: status.conditions: input"),
        (
            lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "1e99"}),
            "node n0: nvidia.com/gpu '1e99' is not a device count",
        ),
    ],
)
def test_odd_node_shapes(tmp_path: Path, mutate: Any, expected: str) -> None:
    line = one_line(kubegan("plan", "--nodes", nodes_file(tmp_path, _odd(mutate)), str(GAN3D)))
    assert expected in line, line


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda p: p["spec"].update(nodeName=["n0"]), "spec.nodeName: input should be a valid"),
        (lambda p: p.update(spec="x"), "spec: expected a mapping"),
        (lambda p: p["spec"].update(containers="x"), "spec.containers: input should be a valid"),
    ],
)
def test_odd_pod_shapes(tmp_path: Path, mutate: Any, expected: str) -> None:
    p = pod("p", "n0", 1)
    mutate(p)
    pods = nodes_file(tmp_path, [p], "pods.yaml")
    line = one_line(
        kubegan("plan", "--nodes", nodes_file(tmp_path, v100()), "--pods", pods, str(GAN3D))
    )
    assert line.startswith("pod default/p: ") and expected in line, line


def test_unschedulable_false_is_not_cordoned() -> None:
    n = node("n0")
    n["spec"]["unschedulable"] = False
    assert not build_inventory([n]).nodes[0].unschedulable


def test_huge_cpu_request_passes_validate_and_plans(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(job_text(**{"gpusPerWorker: 0": 'gpusPerWorker: 0\n    cpu: "1e99"'}))
    assert kubegan("validate", str(job)).returncode == 0
    nodes = nodes_file(tmp_path, [node("n0", gpus=0), node("n1", gpus=0)])
    result = kubegan("plan", "--nodes", nodes, str(job))
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert "CPU free, need 1e99" in json.loads(result.stdout)["reason"]


# ---- the planner never accepts the impossible ---------------------------------------------


def _spec(**resources: Any) -> Any:
    from kubegan_api.spec import GANTrainingJobSpec

    return GANTrainingJobSpec.model_validate(
        {"framework": "pytorch", "model": {"name": "dcgan"}, "resources": resources}
    )


def test_negative_gpu_request_never_frees_capacity() -> None:
    inventory = build_inventory([node("n0", 8)], [pod("p", "n0", -8)])
    assert inventory.problems == ("pod default/p: resources nvidia.com/gpu: '-8' is negative",)
    assert inventory.nodes[0].free_gpus == 8  # not 16
    assert not plan(_spec(gpus=16), inventory).feasible


def test_a_node_listed_twice_gets_no_second_worker() -> None:
    inventory = build_inventory([node("n0", 8), node("n0", 8)])
    assert inventory.problems == ("node n0: listed more than once",)
    assert [n.name for n in inventory.nodes] == ["n0"]
    assert not plan(_spec(workers=2, gpusPerWorker=8), inventory).feasible


def test_a_node_listed_twice_on_the_command_line(tmp_path: Path) -> None:
    nodes = nodes_file(tmp_path, [node("n0", spot=True)] * 4)
    assert kubegan("plan", "--nodes", nodes, str(GAN3D)).returncode == 2


def test_3x3_tpu_topology_is_refused_not_rounded_to_8_chips(tmp_path: Path) -> None:
    text = job_text(
        **{
            "framework: pytorch": "framework: tensorflow",
            "workers: 2\n    gpusPerWorker: 0": (
                "tpu: {accelerator: tpu-v5-lite-podslice, topology: 3x3}"
            ),
        }
    )
    code, lines = validate_text(tmp_path, text)
    assert code == 2
    assert lines == [
        "spec.resources.tpu.topology: must be a TPU slice shape such as 2x4, 4x4 or 2x2x4: two "
        "or three dimensions, each 1, 2 or a multiple of 4"
    ]
    assert kubegan("render", str(tmp_path / "job.yaml")).returncode == 2


def test_static_plan_never_rounds_a_slice_down() -> None:
    # A spec made in Python without validation (as a test or a future caller might):
    # the planner itself still refuses to turn 9 chips into 2 hosts of 4.
    from kubegan_api.resources import ResourcesSpec, TpuSpec

    tpu = TpuSpec.model_construct(accelerator="tpu-v4-podslice", topology="3x3")
    spec = _spec(workers=1, gpusPerWorker=0).model_copy(
        update={"resources": ResourcesSpec.model_construct(tpu=tpu)}
    )
    p = static_plan(spec)
    assert not p.feasible and "9 chips" in p.reason


def test_a_huge_price_never_prints_infinity(tmp_path: Path) -> None:
    text = GAN3D.read_text().replace(
        "  placement:", "  cost: {acceleratorHourlyPrice: 1.0e+300}\n  placement:"
    )
    job = tmp_path / "job.yaml"
    job.write_text(text)
    line = one_line(kubegan("validate", str(job)))
    assert line == "spec.cost.acceleratorHourlyPrice: input should be less than or equal to 1000000"
    prices = tmp_path / "prices.yaml"
    prices.write_text("accelerators:\n  nvidia-tesla-v100: {onDemand: 1.0e+308, spot: 1}\n")
    line = one_line(
        kubegan(
            "plan", "--nodes", nodes_file(tmp_path, v100()), "--prices", str(prices), str(GAN3D)
        )
    )
    assert "is not a price in USD per hour" in line


def test_plan_json_is_valid_at_the_price_limits(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("accelerators:\n  nvidia-tesla-v100: {onDemand: 1000000, spot: 1000000}\n")
    nodes = nodes_file(tmp_path, [node(f"n{i}", 64, spot=True) for i in range(4)])
    result = kubegan("plan", "--nodes", nodes, "--prices", str(prices), str(GAN3D))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout, parse_constant=lambda c: pytest.fail(c))["costPerHour"] > 0


def test_a_huge_cpu_request_at_the_price_limit_renders_a_finite_rate(tmp_path: Path) -> None:
    """The API admits CPU and memory quantities up to 1e99 (and as many digits as fit in a
    job file); priced, they stay a finite JSON number."""
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "accelerators: {}\ncpu: {onDemand: 1000000, spot: 1000000}\n"
        "memory: {onDemand: 1000000, spot: 1000000}\n"
    )
    job = tmp_path / "job.yaml"
    huge = "9" * 5000
    job.write_text(
        job_text(
            **{"gpusPerWorker: 0": f'gpusPerWorker: 0\n    cpu: "1e99"\n    memory: "{huge}Ei"'}
        )
    )
    result = kubegan("render", "--prices", str(prices), str(job))
    assert result.returncode == 0, result.stderr
    pods = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Pod"]
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert 0 < float(env[ENV_COST_RATE_PER_HOUR]) < 1e20


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (
            "accelerator:\n  nvidia-tesla-v100: {onDemand: 2, spot: 1}\n",
            "accelerator: unknown field",
        ),
        (
            "accelerators:\n  nvidia-tesla-v100: {ondemand: 2, spot: 1}\n",
            "accelerators.nvidia-tesla-v100.ondemand: unknown field",
        ),
        ("accelerators:\n  nvidia-tesla-v100: {onDemand: '2', spot: 1}\n", "valid number"),
        ("sorce: x\naccelerators: {}\n", "sorce: unknown field"),
        ("accelerators: {}\ncpus: {onDemand: 0.03, spot: 0.01}\n", "cpus: unknown field"),
        ("machineType:\n  g2-standard-8: {onDemand: 0.85}\n", "machineType: unknown field"),
        ("accelerators: {}\nmemory: {onDemand: 0.004, spt: 0}\n", "memory.spt: unknown field"),
        ("cloud: aws\n", "cloud: input should be 'gcp' or 'azure'"),
        ("accelerators: {}\ncpu: {onDemand: -1, spot: 0}\n", "is not a price in USD per hour"),
        ("- a\n", "expected a price table"),
    ],
)
def test_a_misspelt_price_table_is_an_error_not_zero_dollars(
    tmp_path: Path, table: str, expected: str
) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(table)
    with pytest.raises(InputError) as err:
        load_prices(prices)
    assert any(expected in line for line in err.value.problems), err.value.problems
    result = kubegan(
        "plan", "--nodes", nodes_file(tmp_path, v100()), "--prices", str(prices), str(GAN3D)
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr


# ---- smaller ------------------------------------------------------------------------------


def test_os_errors_name_what_failed() -> None:
    with open("/dev/full", "w") as full:
        result = kubegan("crd", stdout=full)
    assert one_line(result) == "kubegan crd: writing stdout: No space left on device"


def test_broken_pipe_is_quiet() -> None:
    result = subprocess.run(
        f"{sys.executable} -m kubegan_operator.entry.cli crd | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.stderr == "" and result.stdout.startswith("# Generated")


def test_in_process_main_gives_the_same_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load(DIGITS.read_text())
    bad = copy.deepcopy(doc)
    bad["spec"]["resources"]["workers"] = True
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(bad))
    assert main(["validate", str(job)]) == 2
    assert capsys.readouterr().err == "spec.resources.workers: input should be a valid integer\n"
