"""What a node pulls: each image's compressed size and layer count, read from the OCI image
layout that hack/build-images.sh writes (~/.cache/kubegan/images/oci, or $KUBEGAN_IMAGE_CACHE).

    .venv/bin/python bench/image_sizes.py                      # the table, every image
    .venv/bin/python bench/image_sizes.py --layers             # and each image's layers
    .venv/bin/python bench/image_sizes.py --compare OLD NEW    # what NEW re-pulls after OLD

Sizes are the layer blobs' sizes as the manifests record them (compressed, as pushed to a
registry and pulled by a node); the config blob (a few KB) is left out. `--compare` takes two
image names of the layout (e.g. two builds of one target with a one-line code change between
them) and says which layers a node that has OLD must pull for NEW. Only JSON is read, each file
bounded and required to be a regular file; no blob is decompressed.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

NAME_KEY = "io.containerd.image.name"
MAX_JSON_BYTES = 4 << 20  # an index or a manifest is a few KB


class LayoutError(Exception):
    """A layout or image that cannot be read; main prints it as one line."""


@dataclass(frozen=True)
class Layer:
    digest: str
    size: int


@dataclass(frozen=True)
class Image:
    name: str
    manifest: str
    layers: tuple[Layer, ...]

    @property
    def compressed(self) -> int:
        return sum(layer.size for layer in self.layers)


def default_layout() -> Path:
    cache = os.environ.get("KUBEGAN_IMAGE_CACHE") or str(Path.home() / ".cache/kubegan/images")
    return Path(cache) / "oci"


def read_json(path: Path) -> dict:
    try:
        st = path.stat()
    except OSError as err:
        raise LayoutError(f"{path}: {err.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise LayoutError(f"{path}: not a regular file")
    if st.st_size > MAX_JSON_BYTES:
        raise LayoutError(f"{path}: {st.st_size} bytes, more than an index or manifest has")
    try:
        data = json.loads(path.read_bytes()[:MAX_JSON_BYTES])
    except ValueError as err:
        raise LayoutError(f"{path}: not JSON ({err})") from None
    if not isinstance(data, dict):
        raise LayoutError(f"{path}: not a JSON object")
    return data


def blob(layout: Path, digest: str) -> Path:
    algo, _, hexdigest = digest.partition(":")
    if (
        algo != "sha256"
        or len(hexdigest) != 64
        or not all(c in "0123456789abcdef" for c in hexdigest)
    ):
        raise LayoutError(f"{layout}: bad digest {digest!r}")
    return layout / "blobs" / "sha256" / hexdigest


def load_images(layout: Path) -> list[Image]:
    """Every named image of the layout's index.json, in its order."""
    images = []
    for entry in read_json(layout / "index.json").get("manifests", []):
        name = entry.get("annotations", {}).get(NAME_KEY)
        if not name:
            continue
        manifest = read_json(blob(layout, entry["digest"]))
        layers = tuple(Layer(x["digest"], int(x["size"])) for x in manifest.get("layers", []))
        images.append(Image(name, entry["digest"], layers))
    return images


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def table(images: list[Image]) -> list[str]:
    rows = [
        "| image | compressed | layers | largest layer | last layer | manifest |",
        "|---|---|---|---|---|---|",
    ]
    for im in images:
        largest = max((x.size for x in im.layers), default=0)
        last = im.layers[-1].size if im.layers else 0
        rows.append(
            f"| `{im.name}` | {human(im.compressed)} | {len(im.layers)} | {human(largest)} | "
            f"{human(last)} | `{im.manifest[7:19]}` |"
        )
    return rows


def layer_rows(im: Image) -> list[str]:
    return [f"  {i}  {x.digest[7:19]}  {human(x.size):>9}" for i, x in enumerate(im.layers)]


def compare(old: Image, new: Image) -> list[str]:
    """What a node holding `old` pulls for `new`: the layers whose digests it lacks."""
    have = {x.digest for x in old.layers}
    pulled = [x for x in new.layers if x.digest not in have]
    reused = len(new.layers) - len(pulled)
    return [
        f"{new.name} after {old.name}: {len(pulled)} of {len(new.layers)} layers to pull, "
        f"{human(sum(x.size for x in pulled))} of {human(new.compressed)} "
        f"({reused} layers, {human(new.compressed - sum(x.size for x in pulled))} reused)",
        *(f"  pull {x.digest[7:19]}  {human(x.size)}" for x in pulled),
    ]


def pick(images: list[Image], name: str) -> Image:
    for im in images:
        if name in (im.name, im.name.rsplit("/", 1)[-1]):
            return im
    raise LayoutError(
        f"no image {name!r} in the layout (have: {', '.join(i.name for i in images)})"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layout", type=Path, default=default_layout(), help="OCI image layout dir")
    ap.add_argument("--layers", action="store_true", help="list each image's layers too")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="what NEW re-pulls")
    args = ap.parse_args(argv)
    try:
        images = load_images(args.layout)
        if not images:
            raise LayoutError(f"{args.layout}: no named images (run make images)")
        print("\n".join(table(images)))
        if args.layers:
            for im in images:
                print(f"\n{im.name}", *layer_rows(im), sep="\n")
        if args.compare:
            print(
                "", *compare(pick(images, args.compare[0]), pick(images, args.compare[1])), sep="\n"
            )
    except (LayoutError, KeyError, TypeError, ValueError) as err:
        print(f"image_sizes: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
