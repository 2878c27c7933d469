"""Hostile and careless inputs for the CLI and the planner, as hypothesis strategies, and the
properties every answer must have. Used by tests/unit/test_properties.py (a short run in
`make test`) and tests/fuzz/fuzz_inputs.py (the long fuzz run, docs/fuzzing.md).

The properties: no exception escapes `kubegan` (a traceback), the exit code is 0, 2 or 3, a
refusal says something on stderr, `plan` prints valid JSON (no NaN/Infinity) whose nodes are
distinct, and no node offers negative or more than its own capacity.
"""

from __future__ import annotations

import copy
import io
import json
import math
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st
from kubegan_operator.entry.cli import main

from tests.support.world import node, pod

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "examples").glob("*.yaml"))]
SECONDS_PER_INPUT = 20  # far above the slowest input; beyond it an input counts as a hang

# ---- values of every shape ----------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, -8, 8, 2**63 - 1, 2**63, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "",
            "5",
            "true",
            "false",
            "1e99",
            "1e9999",
            "-8",
            "8",
            "500m",
            "16Gi",
            "4x4",
            "3x3",
            "99x99x99",
            "nan",
            ".inf",
            "a b\nc",
            "nvidia-tesla-v100",
            "tpu-v5-lite-podslice",
            "x" * 300,
            "\u00e9\u4e2d",
            "0x10",
            "1_000",
            "pytorch",
            "tensorflow",
        ]
    ),
    st.text(max_size=20),
)


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    return st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found += _paths(v, (*prefix, i))
    return found


@st.composite
def mutated(draw: st.DrawFn, base: Any, rounds: int = 3) -> Any:
    """`base` with a few values replaced, keys deleted or unknown keys added."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, rounds))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_values())
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(json_values(4))
    return doc


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


# Text-level damage that a structured mutation never produces.
ALIAS_BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)
)


@st.composite
def damaged_text(draw: st.DrawFn, text: str) -> str | bytes:
    kind = draw(
        st.sampled_from(
            ["keep"] * 8
            + [
                "truncate",
                "duplicate-line",
                "bytes",
                "bomb",
                "deep",
                "anchor",
                "tag",
                "recursive",
                "tab",
            ]
        )
    )
    lines = text.splitlines(keepends=True)
    if kind == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    if kind == "duplicate-line" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        return "".join([*lines[: i + 1], lines[i], *lines[i + 1 :]])
    if kind == "bytes":
        data = text.encode()
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    if kind == "bomb":
        return ALIAS_BOMB + text
    if kind == "deep":
        depth = draw(st.integers(50, 400))
        return text + "zz: " + "[" * depth + "]" * depth + "\n"
    if kind == "anchor" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        return "".join(lines[:i]) + "x: &x {a: [1, 2]}\ny: *x\n" + "".join(lines[i:])
    if kind == "tag":
        tag = draw(st.sampled_from(["!!binary aGk=", "!!set {a}", "2024-01-01", "!!python/none"]))
        return text + f"zz: {tag}\n"
    if kind == "recursive":
        return text + "zz: &r [*r]\n"
    if kind == "tab":
        return text.replace("  ", "\t", 1)
    return text


# ---- jobs, nodes, pods, prices ------------------------------------------------------------

# Jobs that the generated nodes can hold, so that plans get as far as feasible ones.
FITTING = [
    {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {"name": "fits"},
        "spec": {"framework": "pytorch", "model": {"name": "dcgan"}, "resources": resources},
    }
    for resources in ({"gpus": 8}, {"gpus": 16}, {"workers": 2, "gpusPerWorker": 4})
] + [
    {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {"name": "tpu"},
        "spec": {
            "framework": "tensorflow",
            "model": {"name": "acgan"},
            "resources": {"tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "4x4"}},
        },
    }
]
_BASES = st.sampled_from(EXAMPLES + FITTING * 2)
jobs = st.one_of(_BASES, _BASES.flatmap(lambda ex: mutated(ex, 2)))


@st.composite
def node_objects(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(st.sampled_from(["n0", "n1", "n2", "n3", "n4"]), max_size=5, unique=True))
    if names and draw(st.integers(0, 5)) == 0:  # now and then a node listed twice
        names.append(names[0])
    out = []
    for name in names:
        kwargs: dict[str, Any] = {
            "gpus": draw(st.sampled_from([0, 1, 2, 4, 8, 16])),
            "spot": draw(st.booleans()),
            "pool": draw(st.sampled_from(["pool-a", "pool-b", ""])),
            "ready": draw(st.booleans()) or draw(st.booleans()),
        }
        if draw(st.booleans()):
            kwargs |= {
                "gpus": 0,
                "tpu_chips": draw(st.sampled_from([1, 4, 8])),
                "labels": {
                    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                    "cloud.google.com/gke-tpu-topology": draw(st.sampled_from(["2x4", "4x4"])),
                },
            }
        out.append(node(name, **kwargs))
    return draw(mutated(out, 2)) if draw(st.integers(0, 3)) == 0 else out


@st.composite
def pod_objects(draw: st.DrawFn) -> list[dict[str, Any]]:
    pods = [
        pod(
            f"p{i}",
            draw(st.sampled_from(["n0", "n1", "n2", "gone"])),
            draw(st.sampled_from([0, 1, 2, 8, 1, 2, 8, -8])),
            phase=draw(st.sampled_from(["Running", "Pending", "Succeeded", "Failed"])),
        )
        for i in range(draw(st.integers(0, 4)))
    ]
    return draw(mutated(pods, 2)) if draw(st.integers(0, 3)) == 0 else pods


PRICE_BASE = {
    "source": "test",
    "asOf": "2024-12",
    "accelerators": {
        "nvidia-tesla-v100": {"onDemand": 2.48, "spot": 0.82},
        "tpu-v5-lite-podslice": {"onDemand": 1.2, "spot": 0.41},
    },
}
price_tables = st.one_of(st.just(PRICE_BASE), mutated(PRICE_BASE, 2))


def as_list(items: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": items}


# ---- the properties -----------------------------------------------------------------------


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def on_alarm(signum: int, frame: object) -> None:
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """`kubegan ARGV` in this process; any exception escaping main() is a traceback."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), time_limit(SECONDS_PER_INPUT):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def check_answer(argv: list[str], code: int, out: str, err: str) -> None:
    assert code in (0, 2, 3), (argv, code, err)
    assert "Traceback" not in err, err
    if code == 2:
        assert err.strip(), f"{argv}: exit 2 without a message"
        assert out == "", f"{argv}: printed output although it refused the input"
    if argv[0] == "plan" and code in (0, 3):
        result = json.loads(out, parse_constant=_reject_constant)
        assert math.isfinite(result["costPerHour"]) and result["costPerHour"] >= 0, result
        assert len(result["nodes"]) == len(set(result["nodes"])), result
        assert result["workers"] >= 0 and result["gpusPerWorker"] >= 0, result
        if result["feasible"] and result["nodes"]:
            assert len(result["nodes"]) == result["workers"], result


def check_files(command: str, files: dict[str, str | bytes]) -> tuple[int, str, str]:
    """Write `files` (job, nodes, pods, prices) and run `kubegan COMMAND` on them."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, content in files.items():
            p = Path(tmp) / f"{name}.yaml"
            p.write_bytes(content if isinstance(content, bytes) else content.encode())
            paths[name] = str(p)
        argv = [command]
        for flag in ("nodes", "pods", "prices"):
            if flag in paths:
                argv += [f"--{flag}", paths[flag]]
        argv.append(paths["job"])
        code, out, err = run_cli(argv)
        check_answer(argv, code, out, err)
        return code, out, err


@st.composite
def cli_cases(draw: st.DrawFn) -> tuple[str, dict[str, str | bytes]]:
    """A command and its files: some whole, some damaged, some hostile."""
    command = draw(st.sampled_from(["validate", "plan", "plan", "render"]))
    files: dict[str, str | bytes] = {"job": draw(damaged_text(_dump(draw(jobs))))}
    if command == "plan" or (command == "render" and draw(st.booleans())):
        # Mostly whole, so that plans get as far as placing; now and then damaged.
        def maybe_damaged(text: str) -> str | bytes:
            return draw(damaged_text(text)) if draw(st.integers(0, 3)) == 0 else text

        files["nodes"] = maybe_damaged(_dump(as_list(draw(node_objects()))))
        if draw(st.booleans()):
            files["pods"] = maybe_damaged(_dump(as_list(draw(pod_objects()))))
        if draw(st.booleans()):
            files["prices"] = maybe_damaged(_dump(draw(price_tables)))
    return command, files


def check_planner(spec_doc: Any, nodes: Any, pods: Any) -> None:
    """The planner on decoded objects: problems, never exceptions; capacity never negative
    nor more than the node has; a feasible plan uses distinct nodes that fit."""
    from kubegan_api.spec import decode_job
    from kubegan_operator.foundation.topology import build_inventory
    from kubegan_operator.placement.planner import plan
    from pydantic import ValidationError

    try:
        job = decode_job(spec_doc)
    except (ValidationError, ValueError):
        return
    inventory = build_inventory(nodes if isinstance(nodes, list) else [],
                                pods if isinstance(pods, list) else [])  # fmt: skip
    names = [n.name for n in inventory.nodes]
    assert len(names) == len(set(names)), names
    for n in inventory.nodes:
        assert 0 <= n.free_gpus <= n.gpus, n
        assert 0 <= n.free_tpu_chips <= n.tpu_chips, n
    result = plan(job.spec, inventory)
    json.dumps(result.to_json(), allow_nan=False)
    if result.feasible:
        chosen = {n.name: n for n in inventory.nodes if n.name in result.nodes}
        assert len(result.nodes) == len(set(result.nodes)) == result.workers, result
        for name in result.nodes:
            assert chosen[name].free_gpus >= result.gpus_per_worker, (name, result)
        if job.spec.resources.gpus is not None:
            assert result.workers * result.gpus_per_worker == job.spec.resources.gpus


planner_cases = st.tuples(jobs, node_objects(), pod_objects())

PROPERTIES: dict[str, tuple[st.SearchStrategy[Any], Callable[..., Any]]] = {
    # the cli check returns (command, exit code) so that a fuzz run can say what it reached
    "cli": (cli_cases(), lambda case: (case[0], check_files(*case)[0])),
    "planner": (planner_cases, lambda case: check_planner(*case)),
}
