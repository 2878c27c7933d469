"""`kubegan operator`: the kopf operator in the foreground against the current kubeconfig."""

from __future__ import annotations

import argparse
import logging
import os

import kopf
from kubegan_api.contract import ENV_ALLOWED_PRIORITY_CLASSES
from kubegan_trainer.launch.ports import is_bindable
from kubegan_trainer.worker.logs import RedactingFormatter
from kubernetes import client
from prometheus_client import start_http_server

import kubegan_operator.runtime.kopf_handlers as handlers  # importing registers kopf's handlers
from kubegan_operator.api.input_files import InputError
from kubegan_operator.api.loading import load_node_pools, load_prices
from kubegan_operator.api.pricing import DEFAULT_PRICES, PriceTable
from kubegan_operator.decide.snapshot import WorkerIdentity
from kubegan_operator.entry.network_flags import network_policy_settings
from kubegan_operator.entry.prices_cmd import base_mapping, opencost_table
from kubegan_operator.foundation.lease import LeaseConfig
from kubegan_operator.manifests.network_policy import NetworkPolicySettings
from kubegan_operator.placement.gang import POD_GROUP_API, POD_GROUP_PLURAL, GangMode
from kubegan_operator.runtime import controller, heap, metrics
from kubegan_operator.runtime.kube import Kube, KubeconfigError
from kubegan_operator.runtime.leader import (
    SERVICE_ACCOUNT_NAMESPACE,
    LeaseElector,
    default_identity,
    default_namespace,
)
from kubegan_operator.runtime.pool_source import PoolSource
from kubegan_operator.runtime.price_refresh import PriceRefresher

log = logging.getLogger("kubegan.operator")


def require_free_ports(args: argparse.Namespace) -> None:
    """Both servers' ports bindable before anything starts: kopf binds the liveness port inside
    its event loop, where a taken port ends the operator with aiohttp's words and no flag."""
    for port, flag in ((args.metrics_port, "--metrics-port"), (args.health_port, "--health-port")):
        if not is_bindable(port, reuse_addr=True):  # as the servers bind
            raise InputError(
                [
                    f"kubegan operator: port {port} ({flag}) is already in use by another "
                    f"process; choose another with {flag} PORT"
                ]
            )


def default_queues(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """--default-queue's pairs as namespace -> LocalQueue; a namespace named twice with two
    queues is refused (which one was meant?)."""
    out: dict[str, str] = {}
    for namespace, queue in pairs:
        if out.get(namespace, queue) != queue:
            raise InputError(
                [
                    f"kubegan operator: --default-queue names namespace {namespace} twice "
                    f"({out[namespace]}, {queue})"
                ]
            )
        out[namespace] = queue
    return out


def worker_identities(
    accounts: list[tuple[str, str]], labels: list[tuple[str, str, str]]
) -> dict[str, WorkerIdentity]:
    """--worker-identity and --worker-identity-label as namespace -> WorkerIdentity. A
    namespace named twice, or a label for a namespace without an identity, is refused: it
    would be silently ignored otherwise."""
    problems: list[str] = []
    named: dict[str, str] = {}
    for namespace, account in accounts:
        if named.get(namespace, account) != account:
            problems.append(
                f"kubegan operator: --worker-identity names namespace {namespace} twice "
                f"({named[namespace]}, {account})"
            )
        named[namespace] = account
    extra: dict[str, dict[str, str]] = {}
    for namespace, key, value in labels:
        if namespace not in named:
            problems.append(
                f"kubegan operator: --worker-identity-label {namespace}={key}={value}: "
                f"namespace {namespace} has no --worker-identity"
            )
        extra.setdefault(namespace, {})[key] = value
    if problems:
        raise InputError(problems)
    return {ns: WorkerIdentity(sa, extra.get(ns, {})) for ns, sa in named.items()}


def allow_priority_classes(names: list[str]) -> None:
    """--allow-priority-class: the system-* classes workers may run with. Kept where every
    validation of a job reads it (kubegan_api.reserved.allowed_priority_classes), as the
    chart's workers.allowHostPath is."""
    if names:
        os.environ[ENV_ALLOWED_PRIORITY_CLASSES] = ",".join(dict.fromkeys(names))


def require_native_gang(kube: Kube) -> None:
    """--gang native only where the apiserver serves PodGroups: elsewhere every gang would
    fail to be created, and an apiserver with the feature gate off would drop the workers'
    schedulingGroup and bind them one by one, with no gang at all."""
    try:
        served = kube.serves(POD_GROUP_API, POD_GROUP_PLURAL)
    except Exception as err:  # unreachable, refused: said in one line before anything starts
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise InputError([f"kubegan operator: --gang native: {first[:200]}"]) from None
    if not served:
        raise InputError(
            [
                f"kubegan operator: --gang native: the apiserver does not serve {POD_GROUP_API} "
                f"{POD_GROUP_PLURAL} (Kubernetes 1.36 with feature gates GenericWorkload and "
                f"GangScheduling and --runtime-config={POD_GROUP_API}=true; docs/install.md)"
            ]
        )


def start_price_refresh(
    ctl: controller.Controller, url: str, prices_path: str | None
) -> PriceRefresher:
    """--prices-from: OpenCost's machine-type prices over the --prices rows, read now and
    every ten minutes; a failed read keeps the table the planner has (runtime/price_refresh)."""
    base = base_mapping(prices_path)

    def apply(table: PriceTable) -> None:
        ctl.observer.prices = table  # one attribute store: the sync threads see old or new

    refresher = PriceRefresher(lambda: opencost_table(url, base), apply)
    refresher.refresh()
    refresher.start()
    return refresher


def network_policy(args: argparse.Namespace) -> NetworkPolicySettings | None:
    """What every job's NetworkPolicy admits (None: --no-network-policy), with the watch of
    the jobs' policies registered when there are any. The operator's own namespace reads
    worker 0's progress; it is known only in a pod (the chart names it besides)."""
    own = default_namespace() if os.path.exists(SERVICE_ACCOUNT_NAMESPACE) else None
    policy = network_policy_settings(args, "operator", own)
    if policy is not None:
        handlers.watch_network_policies()
    return policy


def _configure_logging(verbose: bool) -> None:
    # No log line repeats a URL's credentials (a client's error may quote one), as the
    # trainer's lines do not.
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    if not verbose:
        # kopf says "Handler succeeded" for every watch event: thousands a minute at scale.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)


def run_operator(args: argparse.Namespace) -> int:
    _configure_logging(args.verbose)
    # The same reader as `kubegan plan --prices`: InputError, one line per problem, before
    # anything starts.
    prices = load_prices(args.prices) if args.prices else DEFAULT_PRICES
    declared = load_node_pools(args.node_pools) if args.node_pools else []
    queues = default_queues(args.default_queue or [])
    identities = worker_identities(args.worker_identity or [], args.worker_identity_label or [])
    allow_priority_classes(args.allow_priority_class or [])
    require_free_ports(args)
    heap.tune()
    try:
        kube = Kube()
    except KubeconfigError as err:  # no kubeconfig, a broken one, no in-cluster config
        raise InputError([f"kubegan operator: {err}"]) from None
    if args.gang == GangMode.native:
        require_native_gang(kube)
    namespaces = args.namespace or []
    ctl = controller.Controller(
        kube,
        prices,
        namespaces,
        read_progress=args.trainer_progress,
        progress_seconds=args.progress_interval,
        pools=PoolSource(declared, karpenter=args.karpenter),
        gang=GangMode(args.gang),
        default_queues=queues,
        identities=identities,
        network_policy=network_policy(args),
    )
    if args.prices_from:
        start_price_refresh(ctl, args.prices_from, args.prices)
    memo = kopf.Memo(controller=ctl)
    if args.leader_elect:
        memo.elector = LeaseElector(
            client.CoordinationV1Api(kube.api),
            LeaseConfig(
                name=args.leader_election_name,
                namespace=args.leader_election_namespace or default_namespace(),
                identity=default_identity(),
            ),
        )
    start_http_server(args.metrics_port, registry=metrics.REGISTRY)
    log.info(
        "kubegan operator: metrics on :%d, liveness on :%d/healthz, prices %s (%s)",
        args.metrics_port,
        args.health_port,
        prices.source,
        prices.as_of,
    )
    kopf.run(
        # kopf's peering is not leader election (it pauses, it does not exclude): the Lease
        # elector decides who reconciles.
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=f"http://0.0.0.0:{args.health_port}/healthz",
        memo=memo,
    )
    return 0
