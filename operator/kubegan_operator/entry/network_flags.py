"""The flags that say what every job's NetworkPolicy admits, shared by `kubegan operator`
(the chart's networkPolicy values) and `kubegan render`, and the settings they make."""

from __future__ import annotations

import argparse
import re

from kubegan_operator.api.input_files import InputError
from kubegan_operator.manifests.network_policy import (
    MONITORING_NAMESPACES,
    EgressAllow,
    EgressError,
    NetworkPolicySettings,
)

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def namespace_arg(text: str) -> str:
    if len(text) > 63 or not _DNS_LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a namespace name (a DNS label)")
    return text


def egress_arg(text: str) -> EgressAllow:
    try:
        return EgressAllow.parse(text)
    except EgressError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_network_policy_flags(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument(
        "--network-policy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give every job a NetworkPolicy <name>-workers that admits only its own workers "
        "and, to the metrics port, the --metrics-namespace namespaces (default: on)",
    )
    own = "the operator's own namespace" if command == "operator" else "kubegan-system"
    p.add_argument(
        "--metrics-namespace",
        action="append",
        type=namespace_arg,
        metavar="NAMESPACE",
        help=f"a namespace whose pods may scrape the workers' metrics port, besides {own} "
        f"(repeatable; default: {', '.join(MONITORING_NAMESPACES)})",
    )
    p.add_argument(
        "--restrict-egress",
        action="store_true",
        help="let workers connect only to their own job's workers, DNS and --egress-allow",
    )
    p.add_argument(
        "--egress-allow",
        action="append",
        type=egress_arg,
        metavar="CIDR[:PORT,...]",
        help="with --restrict-egress: a destination the workers may reach, on these TCP "
        "ports or all (repeatable; e.g. 0.0.0.0/0:443 for cloud storage)",
    )


def network_policy_settings(
    args: argparse.Namespace, command: str, own_namespace: str | None
) -> NetworkPolicySettings | None:
    """The settings the flags make (None with --no-network-policy); InputError for flags
    that would be ignored."""
    problems = []
    if args.egress_allow and not args.restrict_egress:
        problems.append(f"kubegan {command}: --egress-allow needs --restrict-egress")
    if not args.network_policy:
        for flag, given in (
            ("--metrics-namespace", args.metrics_namespace),
            ("--restrict-egress", args.restrict_egress),
            ("--egress-allow", args.egress_allow),
        ):
            if given:
                problems.append(f"kubegan {command}: {flag} needs --network-policy")
    if problems:
        raise InputError(problems)
    if not args.network_policy:
        return None
    named = args.metrics_namespace if args.metrics_namespace else MONITORING_NAMESPACES
    scrapers = dict.fromkeys([*([own_namespace] if own_namespace else []), *named])
    return NetworkPolicySettings(
        metrics_namespaces=tuple(scrapers),
        restrict_egress=args.restrict_egress,
        egress=tuple(args.egress_allow or ()),
    )
