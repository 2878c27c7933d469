#!/usr/bin/env bash
# Keep the "node image store": one containerd root holding the images of hack/build-images.sh,
# from which hack/real-node-up.sh gives every *new* real node its images by hard links (as a
# cloud node pool boots from a disk image with the images pre-pulled).
#
#   hack/seed-node-images.sh [TARGET...]    default: every archive build-images.sh made
#
# Why: the trainer images are several GB unpacked (torch from PyPI brings its CUDA libraries).
# Importing them into each node's containerd took ~3.5 min and ~14 GB per node here; hard
# links make a new node's copy take seconds and no space. Nodes still get their own containerd
# metadata (the bolt databases are copied, not linked), and nothing ever writes into an
# unpacked layer or a content blob, so sharing their files is safe.
#
# The store is updated with a containerd of its own (no CRI, own socket and state under /run),
# through hack/load-images.sh: an image whose digest is already there is skipped, and a new
# build adds only the layers that changed. Images in running nodes are not touched: for those,
# hack/load-images.sh (make load-images).
#
# Environment: KUBEGAN_NODE_IMAGE_STORE (default ~/.cache/kubegan/node-image-store),
# KUBEGAN_IMAGE_CACHE as for hack/load-images.sh. One store serves every site
# (KUBEGAN_REAL_SITE): it holds images only, never a running node's state.
set -Eeuo pipefail
trap 'echo "seed-node-images.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=hack/real-node-lib.sh
source "$HACK_DIR/real-node-lib.sh"
RUN_DIR=/run/kubegan-node-image-store
SOCK="$RUN_DIR/containerd.sock"

log() { printf '[seed-node-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[seed-node-images] ERROR: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root (containerd)"
command -v containerd >/dev/null || die "containerd is missing; run make node-binaries"
mkdir -p "$NODE_IMAGE_STORE/root"
exec 9>"$NODE_IMAGE_STORE.lock"
flock 9   # one writer; real-node-up takes it shared while it copies
# Made under the lock: a seeder that held it before us (another site's tier, a second shell)
# removes the directory when it ends.
mkdir -p "$RUN_DIR"

image_containerd_config "$NODE_IMAGE_STORE/root" "$RUN_DIR/state" "$SOCK" "$RUN_DIR/opt" >"$RUN_DIR/config.toml"

pid=""
start() {
  mkdir -p "$NODE_IMAGE_STORE/root"
  containerd --config "$RUN_DIR/config.toml" >>"$NODE_IMAGE_STORE/containerd.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 60); do ctr --address "$SOCK" version >/dev/null 2>&1 && return 0; sleep 0.5; done
  die "the store's containerd did not start (log: $NODE_IMAGE_STORE/containerd.log)"
}
stop() {
  [[ -n "$pid" ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}
trap 'stop; rm -rf "$RUN_DIR"' EXIT

t0=$SECONDS
start
if ! KUBEGAN_CONTAINERD_SOCKETS="$SOCK" bash "$HACK_DIR/load-images.sh" "$@"; then
  # A store left inconsistent (e.g. by a full disk during an earlier import) is only a cache:
  # start it again from nothing, once.
  log "import into the store failed; rebuilding the store from scratch"
  stop
  rm -rf "$NODE_IMAGE_STORE/root"
  start
  KUBEGAN_CONTAINERD_SOCKETS="$SOCK" bash "$HACK_DIR/load-images.sh" "$@"
fi
stop

# The store's content blobs are byte for byte the layout's (same digests, both never written
# after they are made): hard-link them so the compressed layers are on disk once (4.7 GB for
# the four images). Link to a temporary name and rename over, so the store never lacks a blob.
LAYOUT_BLOBS="${KUBEGAN_IMAGE_CACHE:-$HOME/.cache/kubegan/images}/oci/blobs/sha256"
linked=0
for blob in "$NODE_IMAGE_STORE"/root/io.containerd.content.v1.content/blobs/sha256/*; do
  src="$LAYOUT_BLOBS/$(basename "$blob")"
  [[ -f "$blob" && -f "$src" && ! "$blob" -ef "$src" ]] || continue
  [[ "$(stat -c %s "$blob")" == "$(stat -c %s "$src")" ]] || continue
  ln "$src" "$blob.link" && mv -f "$blob.link" "$blob" && linked=$((linked + 1))
done
((linked == 0)) || log "hard-linked $linked content blob(s) to the OCI layout's"
log "node image store $NODE_IMAGE_STORE up to date in $((SECONDS - t0)) s ($(du -sh "$NODE_IMAGE_STORE/root" | cut -f1))"
