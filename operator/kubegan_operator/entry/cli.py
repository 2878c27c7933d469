"""The `kubegan` command line (DESIGN §7).

Exit codes: 0 success, 2 bad input (one line per problem on stderr), 3 infeasible plan,
4 a price source that could not be read (`kubegan prices`, `--prices-from`; one line).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml
from kubegan_api.contract import EXIT_USER_ERROR, KUEUE_QUEUE_LABEL
from kubegan_api.spec import GANTrainingJob
from kubegan_api.urls import redact_urls

from kubegan_operator import __version__
from kubegan_operator.api.input_files import InputError
from kubegan_operator.api.loading import load_job, load_objects, load_prices
from kubegan_operator.api.price_file import PriceSourceError
from kubegan_operator.api.pricing import DEFAULT_PRICES, PriceTable
from kubegan_operator.api.rates import unpriced_message
from kubegan_operator.entry.arg_types import (
    default_queue_arg,
    name_arg,
    path_arg,
    priority_class_arg,
    progress_seconds_arg,
    worker_count_arg,
    worker_identity_arg,
    worker_identity_label_arg,
)
from kubegan_operator.entry.artifacts_cli import add_artifact_commands
from kubegan_operator.entry.data_cmd import add_data_parser
from kubegan_operator.entry.network_flags import (
    add_network_policy_flags,
    network_policy_settings,
)
from kubegan_operator.entry.plan_compare import (
    add_plan_flags,
    check_plan_flags,
    plan_pools,
    print_comparison,
)
from kubegan_operator.entry.prices_cmd import (
    EXIT_SOURCE_FAILED,
    add_prices_parser,
    prices_from,
    prices_from_arg,
)
from kubegan_operator.foundation.topology import Inventory, build_inventory
from kubegan_operator.manifests.network_policy import OPERATOR_NAMESPACE
from kubegan_operator.manifests.pod_groups import held_natively
from kubegan_operator.placement.gang import GangMode
from kubegan_operator.placement.localplan import local_plan
from kubegan_operator.placement.plan import Plan
from kubegan_operator.placement.planner import plan, static_plan

EXIT_BAD_INPUT = EXIT_USER_ERROR  # the trainer's code for a wrong job: one meaning
EXIT_INFEASIBLE = 3


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2 like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message}\n")


class _ManifestDumper(yaml.SafeDumper):
    """Multi-line strings (the config.json) as literal blocks, as kubectl users read them."""


_ManifestDumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    ),
)


def _prices(path: str | None, opencost: str | None = None) -> PriceTable:
    if opencost is not None:  # OpenCost's machine prices over the --prices rows
        return prices_from(opencost, path)
    if path is None:
        return DEFAULT_PRICES
    return load_prices(path)  # type: ignore[no-any-return]


def _plan_for(args: argparse.Namespace, job_path: str) -> tuple[Plan, object]:
    job = load_job(job_path)
    prices = _prices(getattr(args, "prices", None), getattr(args, "prices_from", None))
    if args.nodes is None:
        return static_plan(job.spec, prices), job
    return plan(job.spec, _inventory(args), prices, plan_pools(args)), job


def _inventory(args: argparse.Namespace) -> Inventory:
    nodes = load_objects(args.nodes, "Node")
    pods = load_objects(args.pods, "Pod") if args.pods else []
    inventory = build_inventory(nodes, pods)
    if inventory.problems:
        raise InputError(inventory.problems)
    return inventory


def _warn_unpriced(command: str, placed: Plan) -> None:
    """One line on stderr when the price table cannot price all that the plan uses."""
    if placed.unpriced:
        print(f"kubegan {command}: warning: {unpriced_message(placed.unpriced)}", file=sys.stderr)


def cmd_crd(args: argparse.Namespace) -> int:
    from kubegan_operator.api.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0


def _check_entrypoint(job: GANTrainingJob) -> None:
    """Refuse an entrypoint that names a standard-library, framework or kubegan callable
    (`os:system`); by name only: validating a job file never imports or runs its code."""
    from kubegan_trainer.base.errors import TrainerError
    from kubegan_trainer.worker.entrypoints import check_entrypoint_name

    if job.spec.model.entrypoint:
        try:
            check_entrypoint_name(job.spec.model.entrypoint)
        except TrainerError as err:
            raise InputError([str(err)]) from None


def _check_custom_model(job: GANTrainingJob) -> str | None:
    """Build a custom model from its entrypoint, as the trainer does at start, where the
    job's framework is installed (imports and runs the job's module: its factory)."""
    from kubegan_trainer.base.errors import TrainerError
    from kubegan_trainer.launch.model_probe import check_custom_model

    model = job.spec.model
    if not model.entrypoint:
        return None
    try:
        return check_custom_model(job.spec.framework.value, model.entrypoint, model.options)
    except TrainerError as err:
        raise InputError([str(err)]) from None


def cmd_validate(args: argparse.Namespace) -> int:
    from kubegan_operator.placement.worker_share import best_effort_warning

    job = load_job(args.job)
    _check_entrypoint(job)
    # Validating a job file never runs its code unless asked: a CI job or a reviewer may
    # validate a file they did not write, whose entrypoint names any installed module.
    unchecked = _check_custom_model(job) if args.check_model else None
    print("valid")
    if unchecked:
        print(f"kubegan validate: warning: {unchecked}", file=sys.stderr)
    warning = best_effort_warning(job.spec.resources.cpu, job.spec.resources.memory)
    if warning:
        print(f"kubegan validate: warning: {warning}", file=sys.stderr)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    check_plan_flags(args)
    if args.compare:
        job = load_job(args.job)
        prices = _prices(args.prices, args.prices_from)
        return 0 if print_comparison(args, job, _inventory(args), prices) else EXIT_INFEASIBLE
    result, _ = _plan_for(args, args.job)
    # allow_nan=False: the output is always JSON (prices and counts are bounded on input).
    print(json.dumps(result.to_json(), indent=2, allow_nan=False))
    _warn_unpriced("plan", result)
    return 0 if result.feasible else EXIT_INFEASIBLE


def cmd_render(args: argparse.Namespace) -> int:
    from kubegan_operator.manifests.pods import render_all

    # The namespace docs/install.md installs the operator into stands in for its own.
    policy = network_policy_settings(args, "render", OPERATOR_NAMESPACE)
    result, job = _plan_for(args, args.job)
    if not result.feasible:
        print(f"kubegan render: {result.reason}", file=sys.stderr)
        return EXIT_INFEASIBLE if args.nodes else EXIT_BAD_INPUT
    manifests = render_all(job, result, network_policy=policy)  # type: ignore[arg-type]
    if args.gang == GangMode.native and result.workers > 1:  # a gang of one needs no holding
        shared = [m for m in manifests if m["kind"] != "Pod"]
        pods = [m for m in manifests if m["kind"] == "Pod"]
        manifests = [*shared, *held_natively(job, pods, result.workers)]  # type: ignore[arg-type]
    sys.stdout.write(yaml.dump_all(manifests, Dumper=_ManifestDumper, sort_keys=False, width=100))
    return 0


def local_gpu_count() -> int:
    """GPUs on this machine, asked of the driver (no framework import for the CLI)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    from kubegan_trainer.worker.cluster_env import visible_gpus  # the one device-list parser

    installed = sum(line.startswith("GPU ") for line in out.splitlines())
    return len(visible_gpus(os.environ, installed)[:installed])


def cmd_run(args: argparse.Namespace) -> int:
    job = load_job(args.job)
    _check_entrypoint(job)
    if job.spec.resources.tpu is not None:
        raise InputError(["spec.resources.tpu: a TPU slice cannot run locally; use a cluster"])
    # Imported here: the trainer's local runner is not needed by any other subcommand.
    from kubegan_trainer.base.errors import TrainerError
    from kubegan_trainer.launch.local_run import run_local
    from kubegan_trainer.launch.local_size import local_size

    # The planner's shape and the pricing module's rate, for this machine (localplan).
    placed, note = local_plan(job.spec, local_gpu_count(), _prices(args.prices))
    if not placed.feasible:
        raise InputError([f"kubegan run: {placed.reason}"])
    if note:
        print(f"kubegan run: {note}", file=sys.stderr)
    _warn_unpriced("run", placed)
    output = Path(args.output) if args.output else Path("runs") / job.metadata.name
    if output.exists() and not output.is_dir():
        raise InputError([f"{output}: exists and is not a directory (--output)"])
    try:
        # An elastic job at another size (--workers N) keeps its global batch by accumulation.
        size = local_size(
            job.spec.resources,
            job.spec.training.gradient_accumulation_steps,
            placed.workers,
            placed.gpus_per_worker,
            getattr(args, "workers", None),
        )
        return run_local(
            job.trainer_config(),
            workers=size.workers,
            gpus_per_worker=placed.gpus_per_worker,
            output_dir=output,
            cost_rate_per_hour=placed.cost_per_hour / placed.workers * size.workers,
            namespace=job.metadata.namespace,
            allow_config_change=getattr(args, "allow_config_change", False),
            accumulation_steps=size.accumulation_steps,
        )
    except TrainerError as err:  # a foreign or busy output directory, a changed job, a size
        raise InputError([f"kubegan run: {err}"]) from None


def cmd_operator(args: argparse.Namespace) -> int:
    from kubegan_operator.entry.main import run_operator

    return run_operator(args)


def _plan_flags(p: argparse.ArgumentParser) -> None:
    add_plan_flags(p)
    p.add_argument(
        "--prices-from",
        metavar="prometheus://HOST:PORT[/path]",
        type=prices_from_arg,
        help="machine-type prices from OpenCost's node_total_hourly_cost in this "
        "Prometheus, over the --prices table's rows",
    )


def _render_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gang",
        choices=[m.value for m in GangMode],
        default=GangMode.gates.value,
        help="render the gang as the operator's --gang holds it: gated workers "
        "(gates) or a PodGroup and its members (native)",
    )
    add_network_policy_flags(p, "render")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kubegan",
        description="Distributed GAN training on Kubernetes: validate, plan, render and run "
        "GANTrainingJob files, or run the operator.",
    )
    parser.add_argument("--version", action="version", version=f"kubegan {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("crd", help="print the GANTrainingJob CRD YAML")
    p.set_defaults(func=cmd_crd)

    p = sub.add_parser(
        "validate",
        help="check a job file",
        description="Exit 0 printing 'valid' (and a warning line on stderr for a job whose "
        "workers would be BestEffort without the operator's default requests), or exit 2 "
        "with one line per problem as '<dotted.path>: <reason>'.",
    )
    p.add_argument("job", metavar="JOB.yaml", type=path_arg)
    p.add_argument(
        "--check-model",
        action="store_true",
        help="also import a custom model's entrypoint and build it as the trainer does, "
        "checking it against the model API (runs that module's code: use it on your own "
        "job files; without it the entrypoint is checked by name only)",
    )
    p.set_defaults(func=cmd_validate)

    for name, func, helptext in (
        ("plan", cmd_plan, "print the placement as JSON; exit 3 when infeasible"),
        (
            "render",
            cmd_render,
            "print the Service/ConfigMap/NetworkPolicy/Pods the operator would create",
        ),
    ):
        p = sub.add_parser(name, help=helptext, description=helptext)
        p.add_argument("job", metavar="JOB.yaml", type=path_arg)
        p.add_argument(
            "--nodes",
            metavar="NODES.yaml",
            type=path_arg,
            required=name == "plan",
            help="nodes as `kubectl get nodes -o yaml` prints them, or a YAML stream",
        )
        p.add_argument(
            "--pods",
            metavar="PODS.yaml",
            type=path_arg,
            help="running pods (`kubectl get pods -A -o yaml`)",
        )
        p.add_argument(
            "--prices",
            metavar="PRICES.yaml",
            type=path_arg,
            help="price table {cloud, region, source, asOf, machineTypes: {TYPE: {onDemand, "
            "spot}}, accelerators: {NAME: ...}, cpu: ..., memory: ...} (USD per hour; default: "
            "the shipped gcp-us-central1 catalogue; others in charts/kubegan/files/prices/)",
        )
        {"plan": _plan_flags, "render": _render_flags}[name](p)
        p.set_defaults(func=func)

    p = sub.add_parser(
        "run",
        help="run the job on this machine (no cluster)",
        description="Run the workers as local processes with checkpoints, samples and "
        "metrics in DIR; run again on the same DIR to resume.",
    )
    p.add_argument("job", metavar="JOB.yaml", type=path_arg)
    p.add_argument(
        "--output", metavar="DIR", type=path_arg, help="output directory (default runs/<name>)"
    )
    p.add_argument(
        "--workers",
        metavar="N",
        type=worker_count_arg,
        help="an elastic job (spec.resources.elastic): run, or resume DIR, with N workers "
        "within its range; gradient accumulation keeps the global batch",
    )
    p.add_argument(
        "--allow-config-change",
        action="store_true",
        help="resume even though the job differs from the one DIR's checkpoints were "
        "trained with (recorded in DIR/config-history.jsonl)",
    )
    p.add_argument(
        "--prices",
        metavar="PRICES.yaml",
        type=path_arg,
        help="price table for the run's cost rate, as for `kubegan plan`",
    )
    p.set_defaults(func=cmd_run)

    add_artifact_commands(sub)  # samples, metrics, export

    add_prices_parser(sub)

    add_data_parser(sub)  # data pack

    p = sub.add_parser(
        "operator",
        help="run the operator in the foreground against the current kubeconfig",
    )
    p.add_argument(
        "--namespace",
        action="append",
        type=name_arg,
        help="watch only this namespace (repeatable)",
    )
    p.add_argument("--metrics-port", type=int, default=8000, help="operator metrics port")
    p.add_argument("--health-port", type=int, default=8080, help="liveness endpoint port")
    p.add_argument("--prices", metavar="PRICES.yaml", type=path_arg, help="price table file")
    p.add_argument(
        "--prices-from",
        metavar="prometheus://HOST:PORT[/path]",
        type=prices_from_arg,
        help="machine-type prices from OpenCost's series in this Prometheus over the --prices "
        "rows, read at start and every 10 minutes (a failed read keeps the last table)",
    )
    p.add_argument(
        "--node-pools",
        metavar="POOLS.yaml",
        type=path_arg,
        help="autoscaled node pools the planner may scale up (the chart's autoscaling.pools)",
    )
    p.add_argument(
        "--karpenter",
        action="store_true",
        help="plan on Karpenter NodePools too (karpenter.sh/v1), listed every 10 s",
    )
    p.add_argument(
        "--gang",
        choices=["gates", "native"],
        default="gates",
        help="hold a gang until all its workers exist with kubegan's scheduling gate "
        "(gates, the default) or with Kubernetes' native gang scheduling (native: a "
        "scheduling.k8s.io/v1alpha2 PodGroup; alpha in Kubernetes 1.36, feature gates "
        "GenericWorkload and GangScheduling)",
    )
    p.add_argument(
        "--default-queue",
        action="append",
        type=default_queue_arg,
        metavar="NAMESPACE=LOCALQUEUE",
        help=f"hand the jobs of NAMESPACE that carry no {KUEUE_QUEUE_LABEL} label to "
        "Kueue's LocalQueue LOCALQUEUE (repeatable; a job's own label wins)",
    )
    p.add_argument(
        "--worker-identity",
        action="append",
        type=worker_identity_arg,
        metavar="NAMESPACE=SERVICEACCOUNT",
        help="run the workers of NAMESPACE's jobs that name no service account as "
        "SERVICEACCOUNT (a workload identity for their bucket; repeatable)",
    )
    p.add_argument(
        "--worker-identity-label",
        action="append",
        type=worker_identity_label_arg,
        metavar="NAMESPACE=KEY=VALUE",
        help="a label for the workers that run as NAMESPACE's --worker-identity (AKS: "
        "azure.workload.identity/use=true; repeatable)",
    )
    p.add_argument(
        "--allow-priority-class",
        action="append",
        type=priority_class_arg,
        metavar="NAME",
        help="let spec.podTemplate name this system-* PriorityClass (system-node-critical, "
        "system-cluster-critical: refused otherwise, as they outrank the node's own pods; "
        "repeatable; the chart's workers.allowedPriorityClasses)",
    )
    p.add_argument(
        "--no-trainer-progress",
        dest="trainer_progress",
        action="store_false",
        help="do not read epoch/checkpoint progress from worker 0's metrics port",
    )
    p.add_argument(
        "--progress-interval",
        type=progress_seconds_arg,
        default=15.0,
        metavar="SECONDS",
        help="read each running job's progress this often (1-3600, default 15)",
    )
    p.add_argument(
        "--leader-elect",
        action="store_true",
        help="reconcile only while holding a coordination.k8s.io Lease (run 2+ replicas)",
    )
    p.add_argument(
        "--leader-election-namespace",
        type=name_arg,
        help="the Lease's namespace (default: the pod's own, else default)",
    )
    p.add_argument(
        "--leader-election-name",
        type=name_arg,
        default="kubegan-operator",
        help="the Lease's name",
    )
    add_network_policy_flags(p, "operator")
    p.add_argument("--verbose", action="store_true")
    p.set_defaults(func=cmd_operator)
    return parser


def _os_error_line(command: str, err: OSError) -> str:
    """One line naming what failed: the file(s) when the error names them; otherwise, for
    every command but `run`, the only thing written without a name is stdout."""
    reason = err.strerror or str(err) or type(err).__name__
    if err.filename is not None:
        target = str(err.filename)
        if err.filename2 is not None:
            target += f" -> {err.filename2}"
    else:
        target = "writing stdout" if command != "run" else ""
    return f"kubegan {command}: {target}: {reason}" if target else f"kubegan {command}: {reason}"


def _silence_stdout() -> None:
    # What is still buffered would fail again at exit and print a traceback-like warning.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a full disk or closed pipe shows here, while we can still say so
        return code
    except InputError as err:
        for line in err.problems:
            print(redact_urls(line), file=sys.stderr)
        return EXIT_BAD_INPUT
    except PriceSourceError as err:  # nothing was written; the source may answer later
        print(f"kubegan {args.command}: {err}", file=sys.stderr)
        return EXIT_SOURCE_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `kubegan crd | head`: the reader has what it wanted
        _silence_stdout()
        return 0
    except OSError as err:  # e.g. an output directory that cannot be created, a full disk
        if err.filename is None and args.command != "run":
            _silence_stdout()
        print(_os_error_line(args.command, err), file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
