#!/usr/bin/env bash
# Push what a cluster installs from a registry (make push REGISTRY=...): the images of
# hack/build-images.sh and the chart, under the versions the chart's defaults name, so that
#   helm install kubegan oci://$REGISTRY/charts/kubegan --version <chart version> \
#     --set image.repository=$REGISTRY/operator
# runs these images with no other image setting:
#   $REGISTRY/{operator,trainer-torch,trainer-tf,trainer-tf-tpu}:<appVersion>   (Chart.yaml)
#   oci://$REGISTRY/charts/kubegan:<version>                                     (helm push)
#
#   REGISTRY=registry.example.com/kubegan hack/push.sh [TARGET...]
#        default: every target in the layout; name some to push only those
#
# The images go from the OCI layout build-images.sh writes (~/.cache/kubegan/images/oci) with
# crane, manifest bytes unchanged (the digests are the layout's, and a node that has the layers
# fetches only the manifest), blob by blob: a blob the registry already has is not sent again.
#
# Credentials: what `crane auth login` / `docker login` ($DOCKER_CONFIG) and `helm registry
# login` stored, or KUBEGAN_REGISTRY_USER with the password in KUBEGAN_REGISTRY_PASSWORD (both
# tools are then logged in first).
# Environment:
#   REGISTRY                       host[:port][/path] (required)
#   KUBEGAN_REGISTRY_CA            a CA bundle to trust for the registry (default: the system's)
#   KUBEGAN_REGISTRY_PLAIN_HTTP=1  http instead of https (a registry without TLS)
#   KUBEGAN_IMAGE_CACHE, KUBEGAN_IMAGE_REPO, KUBEGAN_IMAGE_TAG   as for build-images.sh
#   KUBEGAN_CHART                  the chart directory (default charts/kubegan)
set -Eeuo pipefail
trap 'echo "push.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
IMAGES="${KUBEGAN_IMAGE_CACHE:-$HOME/.cache/kubegan/images}"
LAYOUT="$IMAGES/oci"
REPO="${KUBEGAN_IMAGE_REPO:-kubegan.local}"
TAG="${KUBEGAN_IMAGE_TAG:-dev}"
CHART="${KUBEGAN_CHART:-$REPO_ROOT/charts/kubegan}"
ALL_TARGETS=(operator trainer-torch trainer-tf trainer-tf-tpu)

log() { printf '[push %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[push] ERROR: %s\n' "$*" >&2; exit 1; }

DEST="${REGISTRY:-}"
DEST="${DEST%/}"
[[ -n "$DEST" ]] || die "REGISTRY is not set: make push REGISTRY=<host[:port][/path]>"
[[ "$DEST" =~ ^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._/-]+)?$ ]] \
  || die "REGISTRY=$DEST: want host[:port][/path] in lower case, without a scheme"
HOST="${DEST%%/*}"
case "${KUBEGAN_REGISTRY_PLAIN_HTTP:-0}" in 0|1) ;; *) die "KUBEGAN_REGISTRY_PLAIN_HTTP: 0 or 1" ;; esac
if [[ -n "${KUBEGAN_REGISTRY_CA:-}" ]]; then
  [[ -f "$KUBEGAN_REGISTRY_CA" ]] || die "KUBEGAN_REGISTRY_CA=$KUBEGAN_REGISTRY_CA is not a file"
fi

bin() {  # bin <name>: its path in the binary cache (hack/build-binaries.sh)
  local p
  p="$(bash "$HACK_DIR/build-binaries.sh" --print | awk -v n="$1" '$1 == n {print $2}')"
  [[ -x "$p" ]] || die "$1 is missing from the binary cache: run make cluster-binaries"
  echo "$p"
}
CRANE="$(bin crane)"
HELM="$(bin helm)"
crane_flags=(); helm_flags=()
if [[ "${KUBEGAN_REGISTRY_PLAIN_HTTP:-0}" == 1 ]]; then
  crane_flags+=(--insecure); helm_flags+=(--plain-http)
fi
if [[ -n "${KUBEGAN_REGISTRY_CA:-}" ]]; then
  # Go reads SSL_CERT_FILE for its roots: crane has no flag of its own for a CA.
  export SSL_CERT_FILE="$KUBEGAN_REGISTRY_CA"
  helm_flags+=(--ca-file "$KUBEGAN_REGISTRY_CA")
fi

chart_field() {  # chart_field <key>: a top-level scalar of Chart.yaml, quotes removed
  sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\} *$/\1/p" "$CHART/Chart.yaml"
}
APP_VERSION="$(chart_field appVersion)"
CHART_VERSION="$(chart_field version)"
[[ -n "$APP_VERSION" && -n "$CHART_VERSION" ]] || die "no version/appVersion in $CHART/Chart.yaml"

[[ -f "$LAYOUT/index.json" ]] || die "no images in $LAYOUT: run make images first"
exec 7>"$IMAGES/.lock-oci"
flock -s 7   # build-images.sh writes and deletes blobs under the exclusive lock
descriptor() {  # descriptor <name>: its entry of index.json (JSON), or nothing
  jq -c --arg n "$1" '.manifests[] | select(.annotations["io.containerd.image.name"] == $n)' \
    "$LAYOUT/index.json"
}
targets=("$@")
if ((${#targets[@]} == 0)); then
  for t in "${ALL_TARGETS[@]}"; do [[ -z "$(descriptor "$REPO/$t:$TAG")" ]] || targets+=("$t"); done
  ((${#targets[@]})) || die "no $REPO/*:$TAG image in $LAYOUT: run make images first"
fi
for t in "${targets[@]}"; do
  [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || die "unknown target '$t' (one of: ${ALL_TARGETS[*]})"
  [[ -n "$(descriptor "$REPO/$t:$TAG")" ]] || die "$REPO/$t:$TAG is not in $LAYOUT: run make images"
done

work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
if [[ -n "${KUBEGAN_REGISTRY_USER:-}" ]]; then
  [[ -n "${KUBEGAN_REGISTRY_PASSWORD:-}" ]] || die "KUBEGAN_REGISTRY_USER needs KUBEGAN_REGISTRY_PASSWORD"
  # helm checks the credentials (crane only stores them): a wrong password stops here.
  printf '%s' "$KUBEGAN_REGISTRY_PASSWORD" \
    | "$HELM" registry login "$HOST" -u "$KUBEGAN_REGISTRY_USER" --password-stdin "${helm_flags[@]}" \
      >/dev/null 2>"$work/login.err" \
    || die "helm registry login $HOST failed: $(tail -n 1 "$work/login.err")"
  printf '%s' "$KUBEGAN_REGISTRY_PASSWORD" \
    | "$CRANE" auth login "$HOST" -u "$KUBEGAN_REGISTRY_USER" --password-stdin >/dev/null 2>&1 \
    || die "crane auth login $HOST failed (it writes \$DOCKER_CONFIG/config.json)"
fi

# One image as a layout of its own (crane pushes a layout of one image): its index entry, and
# the shared blobs by a symlink, so nothing is copied.
one_image_layout() {  # one_image_layout <name> <dir>
  mkdir -p "$2"
  cp "$LAYOUT/oci-layout" "$2/oci-layout"
  ln -sfn "$LAYOUT/blobs" "$2/blobs"
  descriptor "$1" | jq -c '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: [.]}' \
    >"$2/index.json"
}
T0=$SECONDS
for t in "${targets[@]}"; do
  t1=$SECONDS
  one_image_layout "$REPO/$t:$TAG" "$work/$t"
  ref="$DEST/$t:$APP_VERSION"
  out="$("$CRANE" push "${crane_flags[@]}" "$work/$t" "$ref" 2>"$work/crane.err")" \
    || die "crane push $ref failed: $(tail -n 3 "$work/crane.err")"
  want="$(descriptor "$REPO/$t:$TAG" | jq -r .digest)"
  [[ "$out" == *"@$want" ]] || die "$ref was pushed as '$out', not with the layout's digest $want"
  log "$ref ${want:7:12} in $((SECONDS - t1)) s"
done

"$HELM" package "$CHART" -d "$work" >/dev/null
"$HELM" push "$work/kubegan-$CHART_VERSION.tgz" "oci://$DEST/charts" "${helm_flags[@]}" >"$work/helm.out" 2>&1 \
  || die "helm push to oci://$DEST/charts failed: $(tail -n 3 "$work/helm.out")"
log "oci://$DEST/charts/kubegan:$CHART_VERSION"
log "done in $((SECONDS - T0)) s; install with:"
log "  helm install kubegan oci://$DEST/charts/kubegan --version $CHART_VERSION --set image.repository=$DEST/operator"
