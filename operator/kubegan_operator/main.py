"""`kubegan operator`: the kopf operator in the foreground against the current kubeconfig."""

from __future__ import annotations

import argparse
import logging
import threading

import kopf
from prometheus_client import start_http_server

from kubegan_operator import controller, metrics
from kubegan_operator.kube import Kube
from kubegan_operator.loading import InputError, load_prices
from kubegan_operator.pricing import DEFAULT_PRICES

log = logging.getLogger("kubegan.operator")


def _resync_forever(ctl: controller.Controller, stop: threading.Event) -> None:
    # Deadlines, TTLs, cost accrual and re-planning after capacity changes need no event.
    while not stop.wait(controller.RESYNC_SECONDS):
        try:
            ctl.resync()
        except Exception:
            log.exception("periodic resync failed; retrying in %ss", controller.RESYNC_SECONDS)


def run_operator(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # The same reader as `kubegan plan --prices`: InputError, one line per problem, before
    # anything starts.
    prices = load_prices(args.prices) if args.prices else DEFAULT_PRICES
    try:
        kube = Kube()
    except Exception as err:  # no kubeconfig, no in-cluster config
        raise InputError([f"kubeconfig: {str(err).splitlines()[0]}"]) from None
    namespaces = args.namespace or []
    controller.CONTROLLER = controller.Controller(
        kube, prices, namespaces, read_progress=args.trainer_progress
    )
    start_http_server(args.metrics_port, registry=metrics.REGISTRY)
    stop = threading.Event()
    threading.Thread(
        target=_resync_forever, args=(controller.CONTROLLER, stop), daemon=True, name="resync"
    ).start()
    log.info(
        "kubegan operator: metrics on :%d, liveness on :%d/healthz, prices %s (%s)",
        args.metrics_port,
        args.health_port,
        prices.source,
        prices.as_of,
    )
    try:
        kopf.run(
            standalone=True,  # one replica (Recreate); kopf peering is not leader election
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=f"http://0.0.0.0:{args.health_port}/healthz",
        )
    finally:
        stop.set()
    return 0
