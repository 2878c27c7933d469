#!/usr/bin/env bash
# Build the Dockerfile's images for the local cluster's real nodes with BuildKit,
# without Docker or a registry, into one OCI image layout directory that
# hack/load-images.sh imports into the nodes' containerd (`ctr images import`).
#
#   hack/build-images.sh [TARGET...]     default: operator trainer-torch trainer-tf trainer-tf-tpu,
#                                        and tiny-gan (not with KUBEGAN_IMAGE_PUSH=1)
#
# Steps: Debian's runc and mmdebstrap (hack/install-debian-packages.sh); buildkitd/buildctl
# (hack/build-buildkit.sh, cached by version); the Python base image (hack/make-python-base.sh,
# cached by its inputs); then a buildkitd started here (OCI worker, runc, overlayfs, host
# network for RUN steps: only PyPI is reachable, no CNI needed), one `buildctl build` per
# target, and the daemon stopped again. Its state, with the layer cache and uv's cache mount,
# is in $KUBEGAN_BUILDKIT_DIR, outside the repo: it survives between runs and fresh clones.
#
# Images (name:tag), all in the OCI layout $KUBEGAN_IMAGE_CACHE/oci/ (index.json names them):
#   kubegan.local/operator:dev  kubegan.local/trainer-torch:dev  kubegan.local/trainer-tf:dev
#   kubegan.local/trainer-tf-tpu:dev
# and the example of docs/custom-models.md, local only (the release pushes the four above):
#   kubegan.local/tiny-gan:dev   examples/models/Dockerfile FROM the trainer-torch:dev just
#                                built (a named context on the layout): one small layer more
# A layout directory rather than tar files: an export after a code change writes only the new
# small layer (sending a 3.4 GB tar took 90 s here); blobs no image uses any more are deleted.
# `hack/load-images.sh --tar TARGET` writes one image as an OCI archive on stdout.
# The last run's sizes are in $KUBEGAN_IMAGE_CACHE/sizes.txt.
#
# Environment:
#   KUBEGAN_IMAGE_CACHE        the OCI layout and the base image (default ~/.cache/kubegan/images)
#   KUBEGAN_BUILDKIT_DIR       buildkitd root, config, log (default ~/.cache/kubegan/buildkit)
#   KUBEGAN_IMAGE_REPO         name prefix (default kubegan.local)
#   KUBEGAN_IMAGE_TAG          tag (default dev)
#   KUBEGAN_TF_EXTRA           the Dockerfile's TF_EXTRA (default empty: no CUDA wheels for
#                              TensorFlow here; the Dockerfile's own default is and-cuda)
#   KUBEGAN_IMAGE_COMPRESSION  layer compression: zstd (default), gzip or uncompressed
#   KUBEGAN_BUILDKIT_MAX_USED  buildkit's cache cap while it runs (default 28GB; its GC keeps at
#                              least 18GB, about what the four images' layers take unpacked and
#                              compressed)
#   KUBEGAN_BUILDKIT_KEEP_MB   what the cache is pruned to after the builds, least recently used
#                              first (default 22000: the current images' layers stay, the layers
#                              of earlier pins go)
#   KUBEGAN_KEEP_UV_CACHE=1    keep uv's download cache mount (pruned after each run otherwise)
#   KUBEGAN_BUILD_MIN_FREE_GB  when the Dockerfile, requirements or base changed since the last
#                              build and less than this is free (default 30), buildkit's cache
#                              is pruned before building (new pins add ~20 GB of layers)
#   KUBEGAN_NICE               niceness of buildkitd and its builds (default 10)
#   KUBEGAN_IMAGE_PUSH=1       push each image to the registry KUBEGAN_IMAGE_REPO names
#                              (credentials from $DOCKER_CONFIG/config.json, as `docker login`
#                              writes them) instead of writing the OCI layout; the release
#                              workflow (.github/workflows/release.yml) builds this way
#   KUBEGAN_IMAGE_PLATFORM     target platform (default linux/amd64)
#   KUBEGAN_IMAGE_ATTEST=1     attach an SBOM (BuildKit's Syft scanner image, pulled from Docker
#                              Hub) and SLSA provenance (mode=max) to each image as attestations,
#                              like `docker buildx build --sbom=true --provenance=mode=max`; the
#                              release workflow does (it needs a registry, so off by default)
#   KUBEGAN_IMAGE_DIGESTS      with KUBEGAN_IMAGE_PUSH=1: a file that gets one line per pushed
#                              image, <repo>/<target>@sha256:... (what the release signs)
#   KUBEGAN_PYTHON_IMAGE       the Dockerfile's PYTHON_IMAGE pulled from a registry (e.g.
#                              python:3.11.13-slim-bookworm) instead of the Debian-made base
#   KUBEGAN_PIP_CA             CA bundle for pip/uv in the build steps (default $PIP_CERT,
#                              $SSL_CERT_FILE or /etc/ssl/certs/ca-certificates.crt)
set -Eeuo pipefail
trap 'echo "build-images.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
IMAGES="${KUBEGAN_IMAGE_CACHE:-$HOME/.cache/kubegan/images}"
BK_DIR="${KUBEGAN_BUILDKIT_DIR:-$HOME/.cache/kubegan/buildkit}"
REPO="${KUBEGAN_IMAGE_REPO:-kubegan.local}"
TAG="${KUBEGAN_IMAGE_TAG:-dev}"
TF_EXTRA="${KUBEGAN_TF_EXTRA:-}"
COMPRESSION="${KUBEGAN_IMAGE_COMPRESSION:-zstd}"
MAX_USED="${KUBEGAN_BUILDKIT_MAX_USED:-28GB}"
KEEP_MB="${KUBEGAN_BUILDKIT_KEEP_MB:-22000}"
NICE="${KUBEGAN_NICE:-10}"
PUSH="${KUBEGAN_IMAGE_PUSH:-0}"
ATTEST="${KUBEGAN_IMAGE_ATTEST:-0}"
DIGESTS="${KUBEGAN_IMAGE_DIGESTS:-}"
PLATFORM="${KUBEGAN_IMAGE_PLATFORM:-linux/amd64}"
PYTHON_IMAGE="${KUBEGAN_PYTHON_IMAGE:-}"
ALL_TARGETS=(operator trainer-torch trainer-tf trainer-tf-tpu)
# Images built FROM one of the above with their own Dockerfile (name -> its directory), after
# it; local only: they show that a derived image works, they are not released.
declare -A EXAMPLE_DIRS=([tiny-gan]=examples/models)
declare -A EXAMPLE_BASE=([tiny-gan]=trainer-torch)
BASE_NAME=kubegan.local/python-base:3.11-bookworm   # = IMAGE_NAME in make-python-base.sh
# The socket lives under /run (a path under a long $HOME could pass the 108-byte limit), named
# after the state dir so that two state dirs never share one.
SOCK_DIR="/run/kubegan-buildkit"
SOCK="$SOCK_DIR/$(printf '%s' "$BK_DIR" | sha256sum | cut -c1-12).sock"

log() { printf '[build-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-images] ERROR: %s\n' "$*" >&2; exit 1; }
human() { numfmt --to=iec --suffix=B --format='%.1f' "$1"; }

targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=("${ALL_TARGETS[@]}")
  [[ "$PUSH" == 1 ]] || targets+=("${!EXAMPLE_DIRS[@]}")
fi
for t in "${targets[@]}"; do
  [[ " ${ALL_TARGETS[*]} ${!EXAMPLE_DIRS[*]} " == *" $t "* ]] \
    || die "unknown target '$t' (one of: ${ALL_TARGETS[*]} ${!EXAMPLE_DIRS[*]})"
  [[ -z "${EXAMPLE_DIRS[$t]:-}" || "$PUSH" != 1 ]] || die "$t is a local example image: not pushed"
done
case "$PUSH" in 0|1) ;; *) die "KUBEGAN_IMAGE_PUSH=$PUSH: 0 or 1" ;; esac
case "$ATTEST" in 0|1) ;; *) die "KUBEGAN_IMAGE_ATTEST=$ATTEST: 0 or 1" ;; esac
[[ -z "$DIGESTS" || "$PUSH" == 1 ]] || die "KUBEGAN_IMAGE_DIGESTS needs KUBEGAN_IMAGE_PUSH=1"
[[ "$KEEP_MB" =~ ^[0-9]+$ ]] || die "KUBEGAN_BUILDKIT_KEEP_MB=$KEEP_MB: a number of MB"
case "$COMPRESSION" in zstd|gzip|uncompressed) ;; *) die "KUBEGAN_IMAGE_COMPRESSION=$COMPRESSION: zstd, gzip or uncompressed" ;; esac
[[ $(id -u) -eq 0 ]] || die "needs root (buildkitd runs build steps with runc)"

T0=$SECONDS
KUBEGAN_DEBIAN_PACKAGES="runc mmdebstrap" bash "$HACK_DIR/install-debian-packages.sh" >&2
RUNC="$(command -v runc)" || die "runc is not installed"
bash "$HACK_DIR/build-buildkit.sh"
BUILDKITD="$(bash "$HACK_DIR/build-buildkit.sh" --print | awk '$1 == "buildkitd" {print $2}')"
BUILDCTL="$(bash "$HACK_DIR/build-buildkit.sh" --print | awk '$1 == "buildctl" {print $2}')"
t=$SECONDS
if [[ -n "$PYTHON_IMAGE" ]]; then
  # A registry is reachable (the release workflow): the Dockerfile pulls its base itself.
  BASE_ARGS=(--opt build-arg:PYTHON_IMAGE="$PYTHON_IMAGE")
else
  BASE_DIR="$(bash "$HACK_DIR/make-python-base.sh")"
  BASE_DIGEST="$(jq -r '.manifests[0].digest' "$BASE_DIR/index.json")"
  [[ "$BASE_DIGEST" == sha256:* ]] || die "no manifest digest in $BASE_DIR/index.json"
  # The base: PYTHON_IMAGE names it and a named context of that name points at the OCI layout.
  BASE_ARGS=(--opt build-arg:PYTHON_IMAGE="$BASE_NAME"
             --opt "context:$BASE_NAME=oci-layout://python-base@$BASE_DIGEST"
             --oci-layout "python-base=$BASE_DIR")
fi
T_BASE=$((SECONDS - t))

mkdir -p "$BK_DIR" "$IMAGES" "$SOCK_DIR"
# One build at a time per state dir: buildkitd locks its root, and a second script would stop
# the first one's daemon.
exec 9>"$BK_DIR/.lock"
if ! flock -n 9; then log "another build holds $BK_DIR/.lock; waiting"; flock 9; fi

# ------------------------------------------------------------------ buildkitd
PIDFILE="$BK_DIR/buildkitd.pid"
BK_LOG="$BK_DIR/buildkitd.log"
bk_pid=""
stop_buildkitd() {  # stop_buildkitd <pid>: TERM, then KILL after 30 s
  local pid="$1"
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then log "buildkitd $pid ignored TERM; killing it"; kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
}
# A daemon left by an interrupted run of this script (same binary, same root) would hold the
# root's lock: stop it. The lock above says no other run of this script is using it.
if [[ -f "$PIDFILE" ]]; then
  old="$(cat "$PIDFILE")"
  if [[ "$old" =~ ^[0-9]+$ ]] && grep -qa -- "$BK_DIR/buildkitd.toml" "/proc/$old/cmdline" 2>/dev/null; then
    log "stopping buildkitd $old left by an earlier run"; stop_buildkitd "$old"
  fi
  rm -f "$PIDFILE"
fi
cleanup() {
  local rc=$?
  if [[ -n "$bk_pid" ]]; then stop_buildkitd "$bk_pid"; rm -f "$PIDFILE"; log "buildkitd stopped"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Config: the OCI worker with Debian's runc on overlayfs (no containerd worker); RUN steps on
# the host network (no CNI); the cache capped so it does not fill a shared disk.
cat >"$BK_DIR/buildkitd.toml" <<TOML
root = "$BK_DIR/root"
[grpc]
  address = ["unix://$SOCK"]
[worker.oci]
  enabled = true
  snapshotter = "overlayfs"
  binary = "$RUNC"
  networkMode = "host"
  gc = true
  reservedSpace = "18GB"
  maxUsedSpace = "$MAX_USED"
  minFreeSpace = "10GB"
[worker.containerd]
  enabled = false
[cdi]
  disabled = true
TOML
rm -f "$SOCK"
echo "=== $(date -u +%FT%TZ) starting buildkitd" >>"$BK_LOG"
nice -n "$NICE" "$BUILDKITD" --config "$BK_DIR/buildkitd.toml" >>"$BK_LOG" 2>&1 </dev/null &
bk_pid=$!
echo "$bk_pid" >"$PIDFILE"
for _ in $(seq 60); do
  "$BUILDCTL" --addr "unix://$SOCK" debug workers >/dev/null 2>&1 && break
  kill -0 "$bk_pid" 2>/dev/null || { tail -n 20 "$BK_LOG" >&2; bk_pid=""; die "buildkitd exited (log: $BK_LOG)"; }
  sleep 0.5
done
"$BUILDCTL" --addr "unix://$SOCK" debug workers >/dev/null 2>&1 || die "buildkitd did not answer on $SOCK in 30 s (log: $BK_LOG)"
log "buildkitd $bk_pid up (root $BK_DIR/root, log $BK_LOG)"

# New pins rebuild the dependency layers (about 20 GB with torch's CUDA wheels and uv's cache
# mount) while the old ones stay cached: buildkit's GC runs between builds, not during one.
# On a shared disk with less than that free, such a build filled it (2026-11-25, disk at 0
# bytes mid-build). So when the layers' inputs changed since the last build and the disk is
# tight, the stale cache goes first (a cold build: about 6 minutes more here).
MIN_FREE_GB="${KUBEGAN_BUILD_MIN_FREE_GB:-30}"
STAMP="$BK_DIR/inputs.sha256"
inputs="$(cat "$REPO_ROOT/Dockerfile" "$REPO_ROOT"/requirements/*.txt | sha256sum | cut -c1-64) $TF_EXTRA ${BASE_DIGEST:-$PYTHON_IMAGE}"
free_gb="$(df --output=avail -BG "$BK_DIR" | tail -n 1 | tr -dc '0-9')"
# No stamp: a fresh cache (nothing to prune) or one from before this check (unknown, kept).
if [[ -f "$STAMP" && "$(cat "$STAMP")" != "$inputs" ]] && ((free_gb < MIN_FREE_GB)); then
  log "the image inputs changed and only ${free_gb} GB is free (under ${MIN_FREE_GB}): pruning buildkit's cache first"
  "$BUILDCTL" --addr "unix://$SOCK" prune --all >/dev/null || log "could not prune buildkit's cache (ignored)"
fi

# ------------------------------------------------------------------ builds
mkdir -p "$IMAGES/logs"
LAYOUT="$IMAGES/oci"
# Readers (load-images.sh) take this lock shared; exports and the blob cleanup take it exclusive.
exec 7>"$IMAGES/.lock-oci"
# The build steps that download (pip for uv itself, uv for the rest) trust what this machine
# trusts: egress here goes through a TLS-intercepting proxy whose CA only the host's bundle
# has. The Dockerfile mounts these optional secrets for those steps alone; no layer keeps them.
CA_BUNDLE="${KUBEGAN_PIP_CA:-${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}}"
[[ -f "$CA_BUNDLE" ]] || die "CA bundle $CA_BUNDLE not found (set KUBEGAN_PIP_CA)"
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\ntimeout = %s\n' "${PIP_DEFAULT_TIMEOUT:-120}" >"$BK_DIR/pip.conf"
printf 'native-tls = true\n' >"$BK_DIR/uv.toml"
SECRETS=(--secret "id=ca-certificates.crt,src=$CA_BUNDLE" --secret "id=pip.conf,src=$BK_DIR/pip.conf"
         --secret "id=uv.toml,src=$BK_DIR/uv.toml")
ATTEST_ARGS=()
[[ "$ATTEST" != 1 ]] || ATTEST_ARGS=(--opt attest:sbom= --opt attest:provenance=mode=max)
[[ -z "$DIGESTS" ]] || : >"$DIGESTS"
# The build's inputs: the repo's Dockerfile and target, or an example's directory FROM the image
# of EXAMPLE_BASE as built here (a named context on the layout: no registry involved).
source_args() {  # source_args <target>: sets SRC_ARGS
  local target="$1" dir base digest
  dir="${EXAMPLE_DIRS[$target]:-}"
  if [[ -z "$dir" ]]; then
    SRC_ARGS=(--local context="$REPO_ROOT" --local dockerfile="$REPO_ROOT" --opt target="$target"
              --opt build-arg:TF_EXTRA="$TF_EXTRA" "${BASE_ARGS[@]}")
    return
  fi
  base="$REPO/${EXAMPLE_BASE[$target]}:$TAG"
  digest="$(jq -r --arg n "$base" \
            '.manifests[] | select(.annotations["io.containerd.image.name"] == $n) | .digest' \
            "$LAYOUT/index.json" 2>/dev/null || true)"
  [[ "$digest" == sha256:* ]] || die "$target is built FROM $base, which is not in $LAYOUT: build ${EXAMPLE_BASE[$target]} first"
  SRC_ARGS=(--local context="$REPO_ROOT/$dir" --local dockerfile="$REPO_ROOT/$dir"
            --opt build-arg:TRAINER_IMAGE="$base"
            --opt "context:$base=oci-layout://base@$digest" --oci-layout "base=$LAYOUT")
}
declare -A BUILD_S
for target in "${targets[@]}"; do
  name="$REPO/$target:$TAG"
  if [[ "$PUSH" == 1 ]]; then
    OUTPUT="type=image,name=$name,push=true,compression=$COMPRESSION,force-compression=true,oci-mediatypes=true"
  else
    OUTPUT="type=oci,tar=false,dest=$LAYOUT,name=$name,compression=$COMPRESSION,force-compression=true,oci-mediatypes=true"
  fi
  blog="$IMAGES/logs/build-$target.log"
  log "$target: building $name (log $blog)"
  t=$SECONDS
  flock 7
  source_args "$target"
  # cmdline: tells the built-in Dockerfile frontend not to fetch the `# syntax=` image (no
  # registry here); it understands everything the Dockerfile uses.
  if ! "$BUILDCTL" --addr "unix://$SOCK" build --progress=plain \
      --frontend dockerfile.v0 "${SRC_ARGS[@]}" \
      --opt cmdline=dockerfile.v0 --opt platform="$PLATFORM" "${ATTEST_ARGS[@]}" \
      "${SECRETS[@]}" \
      --output "$OUTPUT" \
      --metadata-file "$IMAGES/logs/metadata-$target.json" >"$blog" 2>&1; then
    tail -n 40 "$blog" >&2
    die "$target: buildctl build failed (log: $blog)"
  fi
  flock -u 7
  BUILD_S[$target]=$((SECONDS - t))
  steps="$(grep -cE '^#[0-9]+ \[' "$blog" || true)"; cached="$(grep -c ' CACHED$' "$blog" || true)"
  log "$target: built and exported in ${BUILD_S[$target]} s ($cached of $steps steps cached)"
  if [[ "$PUSH" == 1 ]]; then
    digest="$(jq -r '."containerimage.digest" // ""' "$IMAGES/logs/metadata-$target.json")"
    log "$target: pushed $name (${digest:-digest unknown})"
    if [[ -n "$DIGESTS" ]]; then
      [[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "$target: no image digest in $IMAGES/logs/metadata-$target.json"
      echo "$REPO/$target@$digest" >>"$DIGESTS"
    fi
  fi
done

printf '%s\n' "$inputs" >"$STAMP"  # every target built: the cache holds these inputs' layers

# uv's download cache (a cache mount, ~9 GB of unpacked wheels with torch) only helps when the
# pins change; on a shared disk it is dropped after each run unless asked to keep it.
if [[ "${KUBEGAN_KEEP_UV_CACHE:-0}" != 1 ]]; then
  "$BUILDCTL" --addr "unix://$SOCK" prune --filter type==exec.cachemount >/dev/null \
    || log "could not prune buildkit's cache mounts (ignored)"
fi
# The GC runs between builds on a daemon that lives only for this script: prune here, so the
# cache a run leaves is the current layers and not the last pins' too (36 GB on 2026-11-27,
# which filled the shared disk on the next build).
"$BUILDCTL" --addr "unix://$SOCK" prune --keep-storage "$KEEP_MB" >/dev/null \
  || log "could not prune buildkit's cache to ${KEEP_MB} MB (ignored)"

if [[ "$PUSH" == 1 ]]; then  # nothing was written to the layout: no blobs or sizes to report
  log "done in $((SECONDS - T0)) s"
  exit 0
fi

# Delete the blobs no image in index.json refers to (layers of earlier builds).
flock 7
keep="$(jq -r '.manifests[].digest' "$LAYOUT/index.json" | while read -r m; do
          echo "${m#sha256:}"
          jq -r '.config.digest, .layers[].digest' "$LAYOUT/blobs/sha256/${m#sha256:}" | sed 's/^sha256://'
        done | sort -u)"
removed=0
for f in "$LAYOUT"/blobs/sha256/*; do
  grep -qx "$(basename "$f")" <<<"$keep" || { rm -f "$f"; removed=$((removed + 1)); }
done
flock -u 7
((removed == 0)) || log "removed $removed unused blob(s) from $LAYOUT"

# ------------------------------------------------------------------ sizes
# Uncompressed size = the layer tars' sizes (what a node's snapshots hold, roughly). Counting
# means decompressing, so each layer's size is remembered by digest.
SIZES_DB="$IMAGES/layer-sizes.txt"
touch "$SIZES_DB"
layer_bytes() {  # layer_bytes <layer-digest> <media-type>
  local n cat_cmd=(cat)
  n="$(awk -v d="$1" '$1 == d {print $2; exit}' "$SIZES_DB")"
  if [[ -z "$n" ]]; then
    case "$2" in *zstd) cat_cmd=(zstd -dcq) ;; *gzip) cat_cmd=(gzip -dc) ;; esac
    n="$("${cat_cmd[@]}" <"$LAYOUT/blobs/sha256/${1#sha256:}" | wc -c)"
    echo "$1 $n" >>"$SIZES_DB"
  fi
  echo "$n"
}
{
  printf '%-34s %10s %12s %6s  %s\n' IMAGE COMPRESSED UNCOMPRESSED LAYERS MANIFEST
  for target in "${ALL_TARGETS[@]}" "${!EXAMPLE_DIRS[@]}"; do
    name="$REPO/$target:$TAG"
    manifest="$(jq -r --arg n "$name" \
                '.manifests[] | select(.annotations["io.containerd.image.name"] == $n) | .digest' \
                "$LAYOUT/index.json")"
    [[ -n "$manifest" ]] || continue
    mfile="$LAYOUT/blobs/sha256/${manifest#sha256:}"
    total=0; n=0
    while read -r d mt; do
      total=$((total + $(layer_bytes "$d" "$mt"))); n=$((n + 1))
    done < <(jq -r '.layers[] | "\(.digest) \(.mediaType)"' "$mfile")
    printf '%-34s %10s %12s %6s  %s\n' "$name" "$(human "$(jq '[.layers[].size] | add' "$mfile")")" \
      "$(human "$total")" "$n" "${manifest:7:12}"
  done
} | tee "$IMAGES/sizes.txt"
log "done in $((SECONDS - T0)) s (base image ${T_BASE} s; $LAYOUT $(du -sh "$LAYOUT" | cut -f1); buildkit state $(du -sh "$BK_DIR/root" 2>/dev/null | cut -f1))"
