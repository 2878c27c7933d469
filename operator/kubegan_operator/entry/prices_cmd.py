"""`kubegan prices --cloud gcp|azure --region R [-o FILE]`: a price table read from the cloud's
price API, and `--prices-from prometheus://HOST:PORT[/path]`: machine-type prices read from
OpenCost's series in a Prometheus, over the `--prices` table (docs/install.md "Refreshing
prices").

A table is written whole or not at all: to a temporary file beside FILE, renamed over it only
once every page was read and the table built. Any failure is one line on stderr and a
non-zero exit; what the table leaves out is said one line each.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubegan_operator.api.input_files import PRICE_LIMITS, InputError
from kubegan_operator.api.price_azure import AZURE_ENDPOINT
from kubegan_operator.api.price_file import (
    PriceRows,
    PriceSourceError,
    overlay,
    price_file_text,
)
from kubegan_operator.api.price_gcp import GCP_ENDPOINT
from kubegan_operator.api.price_opencost import prometheus_base_url
from kubegan_operator.api.pricing import PriceTable
from kubegan_operator.api.yaml_json import read_yaml
from kubegan_operator.entry.arg_types import path_arg

KEY_VARIABLE = "GOOGLE_API_KEY"  # a Google Cloud API key allowed to call the Cloud Billing API
ENDPOINT_VARIABLE = "KUBEGAN_PRICES_ENDPOINT"  # another base URL for the price API (tests)
EXIT_SOURCE_FAILED = 4  # the source could not be read: try again later, nothing was written
DEFAULT_ENDPOINTS = {"gcp": GCP_ENDPOINT, "azure": AZURE_ENDPOINT}

# Region names of both clouds (us-central1, europe-west4, eastus, westeurope): they go into
# a URL and an OData filter, so nothing else is let through.
_REGION = re.compile(r"[a-z][a-z0-9-]{1,48}[a-z0-9]")


def region_arg(text: str) -> str:
    if not _REGION.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a region name (lowercase letters, digits and '-', such as "
            "us-central1 or eastus)"
        )
    return text


def endpoint_arg(text: str) -> str:
    parts = re.fullmatch(r"(https?)://([^/?#\s@]+)(/[^?#\s]*)?", text)
    if not parts:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) base URL")
    return text.rstrip("/")


def prices_from_arg(text: str) -> str:
    """`prometheus://HOST:PORT[/path]` as the http:// base URL it names."""
    try:
        return prometheus_base_url(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def today() -> str:
    return datetime.now(UTC).date().isoformat()


def write_atomically(path: Path, text: str) -> None:
    """`text` as `path`'s new content, or `path` untouched: written aside, then renamed."""
    if path.is_dir():
        raise InputError([f"{path}: is a directory (-o names the table's file)"])
    mode = path.stat().st_mode & 0o777 if path.is_file() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read(args: argparse.Namespace) -> PriceRows:
    from kubegan_operator.runtime.price_sources import read_azure, read_gcp

    endpoint = args.endpoint or os.environ.get(ENDPOINT_VARIABLE) or DEFAULT_ENDPOINTS[args.cloud]
    if endpoint != args.endpoint:
        try:
            endpoint = endpoint_arg(endpoint)
        except argparse.ArgumentTypeError as err:
            raise InputError([f"kubegan prices: {ENDPOINT_VARIABLE}: {err}"]) from None
    if args.cloud == "azure":
        return read_azure(args.region, endpoint, today())
    key = os.environ.get(KEY_VARIABLE, "").strip()
    if not key:
        raise InputError(
            [
                f"kubegan prices: --cloud gcp reads the Cloud Billing Catalog API with an API "
                f"key: set {KEY_VARIABLE} (a key of your project with that API enabled)"
            ]
        )
    return read_gcp(args.region, key, endpoint, today())


def cmd_prices(args: argparse.Namespace) -> int:
    rows = _read(args)  # every page read and parsed before anything is written
    try:  # what is written is a table kubegan reads, or nothing is written
        PriceTable.from_mapping(rows.to_mapping())
    except ValueError as err:
        first = (str(err).splitlines() or [type(err).__name__])[0]
        raise PriceSourceError(f"{rows.source}: not a usable price table ({first})") from None
    text = price_file_text(rows)
    if args.output:
        write_atomically(Path(args.output), text)
    else:
        sys.stdout.write(text)
    for note in rows.notes:
        print(f"kubegan prices: {note}", file=sys.stderr)
    return 0


def add_prices_parser(sub: Any) -> None:
    p = sub.add_parser(
        "prices",
        help="write a price table read from the cloud's price API",
        description="Read on-demand and spot prices of the machine types and accelerators "
        "kubegan knows from the Azure Retail Prices API (no key) or the Cloud Billing Catalog "
        f"API (an API key in {KEY_VARIABLE}), and write them as a price table "
        "(the chart's `prices` value, --prices). What the API does not price is left out and "
        "named on stderr, one line each. Nothing is written when a page cannot be read.",
    )
    p.add_argument("--cloud", choices=sorted(DEFAULT_ENDPOINTS), required=True)
    p.add_argument("--region", type=region_arg, required=True, help="e.g. us-central1, eastus")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        type=path_arg,
        help="write the table here (default: stdout)",
    )
    p.add_argument(
        "--endpoint",
        metavar="URL",
        type=endpoint_arg,
        help=f"the price API's base URL (default: the cloud's; also {ENDPOINT_VARIABLE})",
    )
    p.set_defaults(func=cmd_prices)


# ---- --prices-from: OpenCost through Prometheus --------------------------------------------


def base_mapping(path: str | None) -> dict[str, Any]:
    """The --prices file as a mapping (the rows OpenCost's are laid over), {} without one."""
    if path is None:
        return {}
    docs = read_yaml(path, PRICE_LIMITS)
    data = docs[0] if len(docs) == 1 else {}
    if not isinstance(data, dict) or len(docs) > 1:
        raise InputError([f"{path}: expected one price table mapping"])
    return data


def opencost_table(base_url: str, base: dict[str, Any]) -> tuple[PriceTable, list[str]]:
    """OpenCost's machine-type prices over `base`, and what was left out, one line each;
    PriceSourceError (one line) when the Prometheus cannot be read, ValueError when the
    merged mapping is not a table."""
    from kubegan_operator.runtime.price_sources import read_opencost

    rows = read_opencost(base_url, today())
    mapping, notes = overlay(base, rows)
    return PriceTable.from_mapping(mapping), rows.notes + notes


def prices_from(base_url: str, prices_path: str | None) -> PriceTable:
    """For `kubegan plan --prices-from`: the table (what it left out on stderr), or one line
    and a non-zero exit."""
    base = base_mapping(prices_path)
    try:
        table, notes = opencost_table(base_url, base)
    except PriceSourceError:
        raise
    except ValueError as err:
        first = (str(err).splitlines() or [type(err).__name__])[0]
        raise InputError(
            [f"--prices-from {base_url}: not a usable price table ({first})"]
        ) from None
    for note in notes:
        print(f"kubegan: prices from OpenCost: {note}", file=sys.stderr)
    return table
