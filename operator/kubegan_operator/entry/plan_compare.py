"""`kubegan plan --compare JOB.yaml --nodes NODES.yaml [--node-pools POOLS.yaml]
[--nodepools NODEPOOLS.yaml] [--epoch-seconds S] [-o table|json]`: every placement the job
could have, one row each (placement/compare.py), as an aligned table or JSON; and the
autoscaled pools `kubegan plan` plans on, as the operator's `--node-pools` and `--karpenter`
give them to it."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

from kubegan_api.spec import GANTrainingJob

from kubegan_operator.api.input_files import InputError
from kubegan_operator.api.loading import load_node_pools, load_objects
from kubegan_operator.api.pricing import PriceTable
from kubegan_operator.decide.cost_accrual import usd
from kubegan_operator.decide.gang_create import per_worker
from kubegan_operator.entry.arg_types import path_arg
from kubegan_operator.foundation.pools import PoolTemplate, from_nodepool
from kubegan_operator.foundation.topology import Inventory
from kubegan_operator.placement.compare import CompareRow, compare

MAX_EPOCH_SECONDS = 10_000_000.0  # 16 weeks an epoch: anything longer is a typo


def epoch_seconds_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_EPOCH_SECONDS:  # NaN fails too
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds above 0 and at most {MAX_EPOCH_SECONDS:,.0f}"
        )
    return value


def add_plan_flags(p: argparse.ArgumentParser) -> None:
    """`kubegan plan`'s pools and its comparison."""
    p.add_argument(
        "--node-pools",
        metavar="POOLS.yaml",
        type=path_arg,
        help="autoscaled pools it may scale up, as the chart's autoscaling.pools "
        "(the operator's --node-pools)",
    )
    p.add_argument(
        "--nodepools",
        metavar="NODEPOOLS.yaml",
        type=path_arg,
        help="Karpenter NodePools (`kubectl get nodepools -o yaml`): their instance types",
    )
    p.add_argument(
        "--compare",
        action="store_true",
        help="print every feasible placement (shape, pool, spot or on-demand) with its rate, "
        "instead of the one the planner picks; exit 3 when there is none",
    )
    p.add_argument(
        "--epoch-seconds",
        type=epoch_seconds_arg,
        metavar="S",
        help="with --compare: an epoch's wall time, for $/epoch and the hours and dollars to "
        "finish spec.training.epochs (the same for every row)",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        help="with --compare: an aligned table (the default) or JSON",
    )


def plan_pools(args: argparse.Namespace) -> list[PoolTemplate]:
    """The pools of --node-pools and --nodepools; a NodePool that cannot be planned on (no
    instance type kubegan knows the size of) is named on stderr and left out, as the
    operator leaves it out."""
    pools: list[PoolTemplate] = []
    if getattr(args, "node_pools", None):
        pools += load_node_pools(args.node_pools)
    if getattr(args, "nodepools", None):
        for obj in load_objects(args.nodepools, "NodePool"):
            template = from_nodepool(obj)
            if isinstance(template, str):
                print(f"kubegan plan: left out: {template}", file=sys.stderr)
            else:
                pools.append(template)
    return pools


def check_plan_flags(args: argparse.Namespace) -> None:
    """The comparison's flags mean nothing without it: say so rather than ignore them."""
    if not args.compare and (args.epoch_seconds is not None or args.output == "table"):
        flag = "--epoch-seconds" if args.epoch_seconds is not None else "-o table"
        raise InputError([f"kubegan plan: {flag} needs --compare"])


def print_comparison(
    args: argparse.Namespace, job: GANTrainingJob, inventory: Inventory, prices: PriceTable
) -> bool:
    """Print the rows; False when there is none (the planner's reason on stderr)."""
    rows, chosen = compare(job.spec, inventory, prices, plan_pools(args), args.epoch_seconds)
    if args.output == "json":
        doc = {
            "job": job.metadata.name,
            "epochs": job.spec.training.epochs,
            "epochSeconds": args.epoch_seconds,
            "alternatives": [r.to_json() for r in rows],
            "reason": "" if rows else chosen.reason,
        }
        print(json.dumps(doc, indent=2, allow_nan=False))
    elif rows:
        sys.stdout.write(comparison_table(rows, args.epoch_seconds is not None))
    if not rows:
        print(f"kubegan plan: no placement: {chosen.reason}", file=sys.stderr)
    return bool(rows)


HEADERS = (
    "", "WORKERS", "PER-WORKER", "ACCELERATOR", "MACHINE", "CAPACITY", "POOL", "NEW-NODES",
    "$/HOUR",
)  # fmt: skip
EPOCH_HEADERS = ("$/EPOCH", "HOURS", "$-TOTAL")
# Only when a row has a part the price table has no price for: its rate leaves that out.
UNPRICED_HEADER = ("UNPRICED",)


def comparison_table(rows: Sequence[CompareRow], with_epochs: bool) -> str:
    """One line per row, columns aligned, numbers right-aligned; the first column holds `*` on
    the planner's choice (as `kubectl config get-contexts` marks the current context), every
    other cell is one word. UNPRICED (what a row's rate leaves out) only when a row has
    such a part."""
    unpriced = any(r.plan.unpriced for r in rows)
    table = [list(HEADERS + (EPOCH_HEADERS if with_epochs else ()) + UNPRICED_HEADER[:unpriced])]
    table += [_cells(r, with_epochs) + [",".join(r.plan.unpriced) or "-"][:unpriced] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    money = range(HEADERS.index("$/HOUR"), len(HEADERS) + len(EPOCH_HEADERS) * with_epochs)
    numeric = {HEADERS.index("WORKERS"), HEADERS.index("NEW-NODES"), *money}
    lines = [
        "  ".join(
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
            for i, cell in enumerate(line)
        ).rstrip()
        for line in table
    ]
    return "\n".join(lines) + "\n"


def _cells(row: CompareRow, with_epochs: bool) -> list[str]:
    p = row.plan
    cells = [
        "*" if row.chosen else "",
        str(p.workers),
        per_worker(p),
        p.accelerator or "-",
        row.machine or "-",
        row.capacity,
        p.pool or "-",
        str(p.new_nodes),
        usd(p.cost_per_hour),
    ]
    if with_epochs:
        cells += [
            usd(row.cost_per_epoch or 0.0),
            f"{row.hours_to_finish or 0.0:.1f}",
            usd(row.cost_to_finish or 0.0),
        ]
    return cells
