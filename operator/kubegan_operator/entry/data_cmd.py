"""`kubegan data pack SRC DEST`: an image folder as WebDataset tar shards with their index,
in a folder or a bucket prefix (kubegan_trainer.data.pack; docs/trainer.md "WebDataset
shards"). Bad input is one line and exit 2; nothing is trained or uploaded elsewhere."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

from kubegan_api.contract import ENV_AWS_ENDPOINT_URL
from kubegan_api.sections import WEBDATASET_SHARD_BYTES

from kubegan_operator.api.input_files import InputError
from kubegan_operator.entry.arg_types import path_arg

_SIZE = re.compile(r"([0-9]{1,13})\s*(Ki|Mi|Gi|K|M|G|KiB|MiB|GiB|KB|MB|GB)?", re.IGNORECASE)
_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "ki": 2**10, "mi": 2**20, "gi": 2**30}


def size_arg(text: str) -> int:
    """Bytes, with an optional unit: 500M, 128Mi, 1G, 1GiB (K/M/G decimal, Ki/Mi/Gi binary)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a size such as 128Mi or 500M")
    unit = (match.group(2) or "").lower().removesuffix("b")
    return int(match.group(1)) * _UNITS.get(unit, 1)


def count_arg(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number of at least 1")
    return int(text)


def cmd_data_pack(args: argparse.Namespace) -> int:
    from kubegan_trainer.base.errors import TrainerError
    from kubegan_trainer.data.pack import pack

    endpoint = args.endpoint or os.environ.get(ENV_AWS_ENDPOINT_URL) or None
    try:
        counts = pack(
            Path(args.src),
            args.dest,
            shard_bytes=args.shard_size,
            max_count=args.max_count or 0,
            seed=args.seed,
            endpoint=endpoint,
        )
    except TrainerError as err:
        line = str(err).splitlines()[0][:500] if str(err) else type(err).__name__
        raise InputError(
            [line if line.startswith("kubegan") else f"kubegan data pack: {line}"]
        ) from None
    print(f"{sum(counts.values())} samples in {len(counts)} shard(s) in {args.dest}")
    return 0


def add_data_parser(sub: Any) -> None:
    p = sub.add_parser("data", help="prepare data sets (pack)")
    data = p.add_subparsers(dest="data_command", required=True, parser_class=type(p))
    pk = data.add_parser(
        "pack",
        help="write an image folder as WebDataset tar shards",
        description="Write the images under SRC (one sub-folder per class gives labels, as "
        "the image-folder loader reads them; a pix2pix folder packs unlabelled) as WebDataset "
        "tar shards (KEY.png + KEY.cls) and a kubegan-shards.json index into DEST, a folder "
        "or a bucket prefix (s3://, gs://, az://; credentials from the environment). The same "
        "SRC and options always write the same bytes. DEST must hold no shards yet.",
    )
    pk.add_argument("src", metavar="SRC", type=path_arg)
    pk.add_argument("dest", metavar="DEST", type=path_arg)
    pk.add_argument(
        "--shard-size",
        type=size_arg,
        default=WEBDATASET_SHARD_BYTES,
        metavar="SIZE",
        help="close a shard before it passes SIZE bytes (default 128Mi; each rank holds a "
        "few shards' decoded images in memory)",
    )
    pk.add_argument("--max-count", type=count_arg, metavar="N", help="at most N samples per shard")
    pk.add_argument(
        "--seed", type=int, default=0, help="the order images are dealt to shards (default 0)"
    )
    pk.add_argument(
        "--endpoint", metavar="URL", help=f"an S3-compatible endpoint (also {ENV_AWS_ENDPOINT_URL})"
    )
    pk.set_defaults(func=cmd_data_pack)
