#!/usr/bin/env bash
# Smoke-test the images of hack/build-images.sh without the cluster: start a throwaway
# containerd (own root, state and socket under $KUBEGAN_IMAGE_TEST_DIR, default
# /tmp/kg-img-test), load the archives with hack/load-images.sh (twice: the second run must
# skip every image), run each image's check as the image's own non-root user with a read-only
# root filesystem, as the pods do, then stop containerd and remove everything it made.
#
#   hack/test-images.sh [TARGET...]     default: every archive present
#
# Checks: the image's own two layers hold /opt/venv only; operator `kubegan --help`; trainer-torch `import kubegan_trainer, torch`;
# tiny-gan (examples/models/Dockerfile FROM trainer-torch) is trainer-torch's layers plus one
# small one, and imports the example package's distribution with no pip left;
# trainer-tf `import kubegan_trainer, tensorflow`; each also prints `id -u`. trainer-tf-tpu
# imports TensorFlow, then runs the trainer's command as a TPU slice's worker: with no TPU here
# it must exit 2 with one line saying no TPU was found (not a traceback).
set -Eeuo pipefail
trap 'echo "test-images.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=hack/real-node-lib.sh
source "$HACK_DIR/real-node-lib.sh"
IMAGES="${KUBEGAN_IMAGE_CACHE:-$HOME/.cache/kubegan/images}"
DIR="${KUBEGAN_IMAGE_TEST_DIR:-/tmp/kg-img-test}"
SOCK="$DIR/containerd.sock"
CGROUP_PARENT="kg-img-test"            # /sys/fs/cgroup/<controller>/kg-img-test/<container>
ALL_TARGETS=(operator trainer-torch trainer-tf trainer-tf-tpu tiny-gan)

log() { printf '[test-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[test-images] ERROR: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (containerd, runc)"
command -v containerd >/dev/null || die "containerd is missing (hack/build-node-binaries.sh installs it)"

REPO="${KUBEGAN_IMAGE_REPO:-kubegan.local}"
TAG="${KUBEGAN_IMAGE_TAG:-dev}"
targets=("$@")
if ((${#targets[@]} == 0)); then
  for t in "${ALL_TARGETS[@]}"; do
    grep -q "\"$REPO/$t:$TAG\"" "$IMAGES/oci/index.json" 2>/dev/null && targets+=("$t")
  done
fi
((${#targets[@]})) || die "no images in $IMAGES/oci: run hack/build-images.sh first"

ctr_() { ctr --address "$SOCK" -n k8s.io "$@"; }
cd_pid=""
cleanup() {
  local rc=$? c m
  if [[ -n "$cd_pid" ]]; then
    for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s KILL "$c" >/dev/null 2>&1 || true; done
    kill -TERM "$cd_pid" 2>/dev/null || true
    for _ in $(seq 40); do kill -0 "$cd_pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$cd_pid" 2>/dev/null || true
    wait "$cd_pid" 2>/dev/null || true
  fi
  # Mounts left under the dir (snapshots, shim rootfs), deepest first; then the cgroups.
  # shellcheck disable=SC2013  # /proc/mounts escapes blanks in paths (\040): one word each
  for m in $(awk -v d="$DIR/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  for c in /sys/fs/cgroup/*/"$CGROUP_PARENT"; do
    [[ -d "$c" ]] || continue
    find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  rm -rf "$DIR"
  if ((rc == 0)); then log "throwaway containerd stopped, $DIR removed"
  else log "FAILED (rc $rc); throwaway containerd stopped, $DIR removed"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[[ ! -e "$DIR" ]] || die "$DIR exists (another test running, or left over: remove it)"
mkdir -p "$DIR"/{root,state,opt}
# throwaway containerd: no CRI, its own root/state/socket
image_containerd_config "$DIR/root" "$DIR/state" "$SOCK" "$DIR/opt" >"$DIR/config.toml"
setsid containerd --config "$DIR/config.toml" >"$DIR/containerd.log" 2>&1 </dev/null &
cd_pid=$!
for _ in $(seq 60); do ctr --address "$SOCK" version >/dev/null 2>&1 && break; sleep 0.25; done
ctr --address "$SOCK" version >/dev/null 2>&1 || { tail -n 20 "$DIR/containerd.log" >&2; die "containerd did not start"; }
log "throwaway containerd $(containerd --version | awk '{print $3}') up: $SOCK"

t=$SECONDS
KUBEGAN_CONTAINERD_SOCKETS="$SOCK" bash "$HACK_DIR/load-images.sh" "${targets[@]}"
log "first load: $((SECONDS - t)) s"
t=$SECONDS
out="$(KUBEGAN_CONTAINERD_SOCKETS="$SOCK" bash "$HACK_DIR/load-images.sh" "${targets[@]}" 2>&1)"
printf '%s\n' "$out" >&2
[[ "$(grep -c 'skipped$' <<<"$out")" == "${#targets[@]}" ]] || die "second load did not skip every image"
log "second load (all skipped): $((SECONDS - t)) s"

# The two layers kubegan adds to the runtime base (dependencies, then the package) hold
# /opt/venv and nothing else: a build step whose cache landed in a layer (uv's, under HOME=/tmp)
# once doubled trainer-torch to 13.9 GB unpacked.
check_layers() {  # check_layers <target>
  local target="$1" manifest layer mt stray cat_cmd
  manifest="$(jq -r --arg n "$REPO/$target:$TAG" \
              '.manifests[] | select(.annotations["io.containerd.image.name"] == $n) | .digest' \
              "$IMAGES/oci/index.json")"
  while read -r layer mt; do
    case "$mt" in *zstd) cat_cmd=(zstd -dcq) ;; *gzip) cat_cmd=(gzip -dc) ;; *) cat_cmd=(cat) ;; esac
    stray="$("${cat_cmd[@]}" <"$IMAGES/oci/blobs/sha256/${layer#sha256:}" | tar -t | grep -v '^opt/' | head -n 3 || true)"
    [[ -z "$stray" ]] || die "$target: layer ${layer:7:12} holds more than /opt: $(tr '\n' ' ' <<<"$stray")"
  done < <(jq -r '.layers[-2:][] | "\(.digest) \(.mediaType)"' "$IMAGES/oci/blobs/sha256/${manifest#sha256:}")
  log "$target: its own layers hold /opt/venv only"
}
for target in "${targets[@]}"; do check_layers "$target"; done

# A derived image (docs/custom-models.md) adds one layer, small, to its base's: the package,
# with pip gone again in the same step.
manifest_of() {  # manifest_of <target>: its manifest file in the layout
  local m
  m="$(jq -r --arg n "$REPO/$1:$TAG" \
       '.manifests[] | select(.annotations["io.containerd.image.name"] == $n) | .digest' \
       "$IMAGES/oci/index.json")"
  [[ -n "$m" ]] || die "$REPO/$1:$TAG is not in $IMAGES/oci"
  echo "$IMAGES/oci/blobs/sha256/${m#sha256:}"
}
check_derived() {  # check_derived <target> <base target> <max bytes of its one layer, compressed>
  local derived base size
  derived="$(manifest_of "$1")"; base="$(manifest_of "$2")"
  [[ "$(jq -c '.layers[:-1] | map(.digest)' "$derived")" == "$(jq -c '.layers | map(.digest)' "$base")" ]] \
    || die "$1: its layers are not $2's plus one (built FROM an older $2? rebuild both)"
  size="$(jq '.layers[-1].size' "$derived")"
  ((size <= $3)) || die "$1: its own layer is $size bytes compressed, over $3"
  log "$1: $2's layers plus one of $size bytes"
}
[[ " ${targets[*]} " != *" tiny-gan "* ]] || check_derived tiny-gan trainer-torch $((8 * 1024 * 1024))

# Each check runs as the image's USER (ctr applies the image config), read-only rootfs, no
# network, HOME=/tmp as in the image; a tmpfs on /tmp like the pods' emptyDir.
run_check() {  # run_check <target> <expected uid> <command...>
  local target="$1" uid="$2" name id out; shift 2
  name="$REPO/$target:$TAG"
  id="kg-img-test-$target"
  t=$SECONDS
  # shellcheck disable=SC2016  # $(id -u) and "$@" are for the shell inside the container
  out="$(ctr_ run --rm --read-only --cgroup "/$CGROUP_PARENT/$id" \
           --mount type=tmpfs,src=tmpfs,dst=/tmp,options=rw:nosuid:nodev:mode=1777 \
           "$name" "$id" sh -c 'echo "uid=$(id -u)"; exec "$@"' sh "$@" 2>&1)" \
    || { printf '%s\n' "$out" >&2; die "$target: check failed: $*"; }
  printf '%s\n' "$out" | sed "s/^/  [$target] /" >&2
  grep -qx "uid=$uid" <<<"$out" || die "$target: ran as $(head -n1 <<<"$out"), want uid=$uid"
  log "$target: ok as uid $uid in $((SECONDS - t)) s"
}
# The TPU image's start on a machine without a TPU: the trainer, as worker 0 of a 2-host slice
# (the variables GKE documents and the operator sets), with a minimal strategy-tpu config.
TPU_CONFIG='{"jobName":"tpu-check","framework":"tensorflow","strategy":"tpu","model":{"name":"acgan"},"data":{"source":"digits"}}'
run_no_tpu_check() {  # run_no_tpu_check <target>
  local target="$1" name id out rc=0
  name="$REPO/$target:$TAG"
  id="kg-img-test-$target-notpu"
  t=$SECONDS
  # shellcheck disable=SC2016  # "$1" is for the shell inside the container
  out="$(ctr_ run --rm --read-only --cgroup "/$CGROUP_PARENT/$id" \
           --mount type=tmpfs,src=tmpfs,dst=/tmp,options=rw:nosuid:nodev:mode=1777 \
           --env KUBEGAN_CONFIG=/tmp/config.json --env KUBEGAN_OUTPUT_DIR=/tmp/out \
           --env KUBEGAN_CHECKPOINT_DIR=/tmp/out/checkpoints --env KUBEGAN_METRICS_PORT=0 \
           --env TPU_WORKER_ID=0 --env TPU_WORKER_HOSTNAMES=w-0.j.ns.svc,w-1.j.ns.svc \
           "$name" "$id" sh -c 'printf "%s" "$1" >/tmp/config.json; exec timeout 300 python -m kubegan_trainer' \
           sh "$TPU_CONFIG" 2>&1)" || rc=$?
  printf '%s\n' "$out" | sed "s/^/  [$target] /" >&2
  ((rc == 2)) || die "$target: without a TPU the trainer exited $rc, want 2"
  ! grep -q Traceback <<<"$out" || die "$target: a traceback instead of one line"
  [[ "$(grep -c 'no TPU was found' <<<"$out")" == 1 ]] || die "$target: no one line saying no TPU was found"
  log "$target: no TPU here: exit 2, one line, in $((SECONDS - t)) s"
}
for target in "${targets[@]}"; do
  case "$target" in
    operator) run_check operator 65532 kubegan --help ;;
    trainer-torch) run_check trainer-torch 1000 python -c \
      'import kubegan_trainer, torch; print("torch", torch.__version__, "cuda build", torch.version.cuda)' ;;
    tiny-gan) run_check tiny-gan 1000 python -c \
      'import importlib.metadata as m, importlib.util as u, kubegan_examples.tiny_gan; assert u.find_spec("pip") is None, "pip is left in the image"; print("kubegan-examples", m.version("kubegan-examples"))' ;;
    trainer-tf) run_check trainer-tf 1000 python -c \
      'import kubegan_trainer, tensorflow as tf; print("tensorflow", tf.__version__)' ;;
    # tensorflow-tpu starts libtpu at import, which without a TPU retries its lookups for
    # good: TensorFlow's TPU_LOAD_LIBRARY=0 skips that for the import check alone.
    trainer-tf-tpu) run_check trainer-tf-tpu 1000 env TPU_LOAD_LIBRARY=0 timeout 300 python -c \
      'import importlib.metadata as m, kubegan_trainer, tensorflow as tf; print("tensorflow", tf.__version__, "libtpu", m.version("libtpu"))'
      run_no_tpu_check trainer-tf-tpu ;;
  esac
done
log "all checks passed"
