"""OCI image layouts as hack/build-images.sh writes them (~/.cache/kubegan/images/oci): the
image a name annotation picks, its manifest and layers; and a tiny layout of the same shape
for tests that push without `make images`."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

NAME = "io.containerd.image.name"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
MAX_JSON = 1 << 20  # an index or manifest is kilobytes; anything bigger is not one


def blob_path(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64 or not hexdigest.isalnum():
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return layout / "blobs" / "sha256" / hexdigest


def read_json(path: Path) -> Any:
    """A small JSON file of the layout: a regular file, bounded in size."""
    if not path.is_file() or path.stat().st_size > MAX_JSON:
        raise ValueError(f"{path}: not a JSON file of at most {MAX_JSON} bytes")
    return json.loads(path.read_bytes())


def descriptor(layout: Path, name: str) -> dict[str, Any]:
    """index.json's entry for an image name (kubegan.local/trainer-torch:dev)."""
    for entry in read_json(layout / "index.json")["manifests"]:
        if entry.get("annotations", {}).get(NAME) == name:
            return dict(entry)
    raise KeyError(f"{name} is not in {layout}/index.json")


def manifest(layout: Path, name: str) -> dict[str, Any]:
    return dict(read_json(blob_path(layout, descriptor(layout, name)["digest"])))


def layer_digests(layout: Path, name: str) -> list[str]:
    return [layer["digest"] for layer in manifest(layout, name)["layers"]]


def _put(layout: Path, data: bytes) -> dict[str, Any]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = blob_path(layout, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"digest": digest, "size": len(data)}


def _layer(content: bytes) -> tuple[bytes, str]:
    """A gzip'd tar with one file; returns it and its diff ID (the uncompressed tar's digest)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        folder = tarfile.TarInfo("kubegan")
        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, 0
        tar.addfile(folder)
        info = tarfile.TarInfo("kubegan/content.txt")
        info.size, info.mtime = len(content), 0
        tar.addfile(info, io.BytesIO(content))
    tar_bytes = raw.getvalue()
    return gzip.compress(tar_bytes, mtime=0), "sha256:" + hashlib.sha256(tar_bytes).hexdigest()


def tiny_layout(layout: Path, names: list[str]) -> Path:
    """A layout with one small image per name (one layer each, its content the name): what
    build-images.sh writes, at a few hundred bytes an image."""
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    entries = []
    for name in names:
        layer, diff_id = _layer(name.encode())
        layer_desc = {
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            **_put(layout, layer),
        }
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/bin/true"]},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        }
        config_desc = {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            **_put(layout, json.dumps(config).encode()),
        }
        body = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": config_desc,
            "layers": [layer_desc],
        }
        entries.append(
            {
                "mediaType": MANIFEST,
                **_put(layout, json.dumps(body).encode()),
                "annotations": {NAME: name, "org.opencontainers.image.ref.name": "dev"},
                "platform": {"architecture": "amd64", "os": "linux"},
            }
        )
    index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}
    (layout / "index.json").write_text(json.dumps(index))
    return layout
