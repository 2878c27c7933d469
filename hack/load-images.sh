#!/usr/bin/env bash
# Import the images made by hack/build-images.sh into the containerd of every running real
# node (hack/real-node-up.sh), in the CRI's namespace k8s.io, so pods with
# imagePullPolicy: Never (or IfNotPresent) find them. No registry involved.
#
#   hack/load-images.sh [TARGET...]      default: every image in the layout but trainer-tf-tpu
#                                        (no local node has a TPU; name it to load it); the
#                                        example tiny-gan (FROM trainer-torch) adds one layer
#   hack/load-images.sh --tar TARGET     write that image as an OCI archive to stdout
#                                        (for `ctr images import`, `skopeo`, ...)
#
# A node that already has an image under the same name with the same manifest digest is
# skipped for it; otherwise the image is streamed as an OCI archive (made on the fly from the
# layout $KUBEGAN_IMAGE_CACHE/oci/, leaving out the layers the node's content store already
# has) into `ctr images import -`, which unpacks only new layers (overlayfs snapshotter). After
# a code change that is the small package layer alone: seconds, not the gigabytes of torch.
#
# Environment:
#   KUBEGAN_IMAGE_CACHE         where build-images.sh put the layout (~/.cache/kubegan/images)
#   KUBEGAN_IMAGE_REPO, KUBEGAN_IMAGE_TAG   as for build-images.sh (kubegan.local, dev)
#   KUBEGAN_CONTAINERD_SOCKETS  space-separated containerd sockets to load into instead of the
#                               real nodes' (e.g. a throwaway containerd for a test)
#   KUBEGAN_REAL_SITE           as for hack/real-node-up.sh: whose nodes (default real)
set -Eeuo pipefail
trap 'echo "load-images.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=real-node-lib.sh
source "$HACK_DIR/real-node-lib.sh"
IMAGES="${KUBEGAN_IMAGE_CACHE:-$HOME/.cache/kubegan/images}"
LAYOUT="$IMAGES/oci"
REPO="${KUBEGAN_IMAGE_REPO:-kubegan.local}"
TAG="${KUBEGAN_IMAGE_TAG:-dev}"
ALL_TARGETS=(operator trainer-torch trainer-tf trainer-tf-tpu tiny-gan)
DEFAULT_TARGETS=(operator trainer-torch trainer-tf tiny-gan)

log() { printf '[load-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[load-images] ERROR: %s\n' "$*" >&2; exit 1; }

[[ -f "$LAYOUT/index.json" ]] || die "no images in $LAYOUT: run hack/build-images.sh (make images) first"
# Shared lock: build-images.sh exports and deletes blobs under the exclusive one.
exec 7>"$IMAGES/.lock-oci"
flock -s 7

descriptor() {  # descriptor <name>: its entry of index.json (JSON), or nothing
  jq -c --arg n "$1" '.manifests[] | select(.annotations["io.containerd.image.name"] == $n)' \
    "$LAYOUT/index.json"
}

# One image of the layout as an OCI archive on stdout: oci-layout, an index.json with only its
# descriptor (name annotations included, which ctr uses as the image name), and its blobs,
# except the layers listed in the file <have> (blobs the node already has: the import then
# links them from its content store instead of reading them again).
image_tar() {  # image_tar <name> [<have> [<import-as>]]
  local desc m work blobs have="${2:-/dev/null}" as="${3:-$1}"
  desc="$(descriptor "$1")"; [[ -n "$desc" ]] || die "$1 is not in $LAYOUT/index.json"
  m="$(jq -r .digest <<<"$desc")"
  work="$(mktemp -d)"
  jq -c --arg n "$as" '.annotations["io.containerd.image.name"] = $n
    | {schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: [.]}' \
    <<<"$desc" >"$work/index.json"
  cp "$LAYOUT/oci-layout" "$work/oci-layout"
  mapfile -t blobs < <({ echo "$m"; jq -r '.config.digest' "$LAYOUT/blobs/sha256/${m#sha256:}"
                         jq -r '.layers[].digest' "$LAYOUT/blobs/sha256/${m#sha256:}" | grep -vxF -f "$have"; } \
                       | sed 's|^sha256:|blobs/sha256/|' | sort -u)
  tar -cf - -C "$work" oci-layout index.json -C "$LAYOUT" "${blobs[@]}"
  rm -rf "$work"
}

if [[ "${1:-}" == --tar ]]; then
  t="${2:?usage: $0 --tar TARGET > image.tar}"
  [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || die "unknown target '$t' (one of: ${ALL_TARGETS[*]})"
  [[ ! -t 1 ]] || die "stdout is a terminal; redirect it to a file"
  image_tar "$REPO/$t:$TAG"
  exit 0
fi

command -v ctr >/dev/null || die "ctr is missing (hack/build-node-binaries.sh installs containerd)"
targets=("$@")
if ((${#targets[@]} == 0)); then
  for t in "${DEFAULT_TARGETS[@]}"; do [[ -n "$(descriptor "$REPO/$t:$TAG")" ]] && targets+=("$t"); done
  ((${#targets[@]})) || die "no $REPO/*:$TAG image in $LAYOUT: run hack/build-images.sh first"
fi
for t in "${targets[@]}"; do
  [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || die "unknown target '$t' (one of: ${ALL_TARGETS[*]})"
  [[ -n "$(descriptor "$REPO/$t:$TAG")" ]] || die "$REPO/$t:$TAG is not in $LAYOUT: run hack/build-images.sh $t"
done

# Sockets: given, or every real node's of the site whose containerd answers (node dirs are
# $RUN_ROOT/<node name>/, e.g. /run/kubegan-real/kubegan-real-1/, see real-node-lib.sh).
sockets=()
if [[ -n "${KUBEGAN_CONTAINERD_SOCKETS:-}" ]]; then
  read -ra sockets <<<"$KUBEGAN_CONTAINERD_SOCKETS"
else
  for s in $(compgen -G "$RUN_ROOT/$(node_name '*')/containerd.sock" | sort -V); do
    if ctr --address "$s" version >/dev/null 2>&1; then sockets+=("$s")
    else log "skipping $s: containerd does not answer"; fi
  done
fi
((${#sockets[@]})) || die "no running real node (make real-nodes-up) and no KUBEGAN_CONTAINERD_SOCKETS"

node_digest() {  # node_digest <socket> <name>: the digest the node has under that name, or ""
  ctr --address "$1" -n k8s.io images ls 2>/dev/null | awk -v n="$2" '$1 == n {print $3}'
}

have="$(mktemp)"; trap 'rm -f "$have"' EXIT
T0=$SECONDS
for t in "${targets[@]}"; do
  name="$REPO/$t:$TAG"
  digest="$(descriptor "$name" | jq -r .digest)"
  for s in "${sockets[@]}"; do
    node="$(basename "$(dirname "$s")")"
    if [[ "$(node_digest "$s" "$name")" == "$digest" ]]; then
      log "$node: $name already at ${digest:7:12}, skipped"; continue
    fi
    t1=$SECONDS
    ctr --address "$s" -n k8s.io content ls -q >"$have" 2>/dev/null || : >"$have"
    # Import (and unpack) under a temporary name, then move the name: while the new image
    # unpacks, the old one still holds the snapshots they share; replacing the name first
    # lets containerd's GC remove a shared parent snapshot mid-unpack ("parent snapshot
    # ... does not exist").
    ctr --address "$s" -n k8s.io images rm "$name-loading" >/dev/null 2>&1 || true
    image_tar "$name" "$have" "$name-loading" | ctr --address "$s" -n k8s.io images import - >/dev/null \
      || die "$node: ctr images import of $name failed"
    ctr --address "$s" -n k8s.io images tag --force "$name-loading" "$name" >/dev/null \
      || die "$node: ctr images tag $name-loading $name failed"
    ctr --address "$s" -n k8s.io images rm "$name-loading" >/dev/null
    got="$(node_digest "$s" "$name")"
    [[ "$got" == "$digest" ]] || die "$node: imported $name but it has digest '${got:-none}', want $digest"
    log "$node: imported $name ${digest:7:12} in $((SECONDS - t1)) s"
  done
done
log "done in $((SECONDS - T0)) s (${#targets[@]} image(s), ${#sockets[@]} node(s))"
