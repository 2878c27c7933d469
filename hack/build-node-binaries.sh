#!/usr/bin/env bash
# Build / install what a *real* node of the local cluster needs (issue 10, work in progress):
#   kubelet            built from the Go module proxy through hack/gomod/kubernetes/ (the
#                      same wrapper module and pins as the control plane), cached by version
#                      in ~/.cache/kubegan/bin/kubelet-<version>/kubelet
#   containerd, runc,  Debian packages (containerd 1.6, runc, containernetworking-plugins),
#   CNI plugins, ...   through hack/install-debian-packages.sh with KUBEGAN_DEBIAN_PACKAGES
#
# Called only by `make node-binaries` / `make real-nodes-up` (not by `make install` or
# `make test` yet). See hack/README.md "Real nodes (work in progress)".
#
# Usage:
#   hack/build-node-binaries.sh            build / install what is missing
#   hack/build-node-binaries.sh --print    print "<name> <path>" for the node binaries
# Environment: KUBEGAN_BIN_CACHE, KUBEGAN_BUILD_DIR, KUBEGAN_GO_P, KUBEGAN_FORCE_BUILD as in
# hack/build-binaries.sh.
#
# kubelet version: the apiserver's own, v1.36.3 (skew 0; policy allows a kubelet up to three
# minors older). This machine runs cgroup v1; kubelet >= 1.35 refuses to start on it unless its
# configuration says `failCgroupV1: false` (KEP-5573), which hack/real-node-up.sh sets.
KUBELET_VERSION=v1.36.3   # must match KUBE_VERSION in hack/build-binaries.sh (same wrapper module)
DEBIAN_NODE_PACKAGES="containerd runc containernetworking-plugins iptables conntrack socat busybox-static"

set -Eeuo pipefail
trap 'echo "build-node-binaries.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${KUBEGAN_BIN_CACHE:-$HOME/.cache/kubegan/bin}"
BUILD_ROOT="${KUBEGAN_BUILD_DIR:-$HOME/.cache/kubegan/build}"
GO_P="${KUBEGAN_GO_P:-2}"
FORCE="${KUBEGAN_FORCE_BUILD:-0}"
KUBELET="$CACHE/kubelet-$KUBELET_VERSION/kubelet"

log() { printf '[build-node-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-node-binaries] ERROR: %s\n' "$*" >&2; exit 1; }

kubelet_ok() {
  local out
  [[ -x "$KUBELET" ]] || return 1
  out="$("$KUBELET" --version 2>&1)" || return 1
  [[ "$out" == "Kubernetes $KUBELET_VERSION" ]] || { log "kubelet at $KUBELET reports '$out'"; return 1; }
}

build_kubelet() {
  if [[ "$FORCE" != 1 ]] && kubelet_ok; then log "kubelet $KUBELET_VERSION: cached ($KUBELET)"; return; fi
  grep -q "k8s.io/kubernetes $KUBELET_VERSION" "$HACK_DIR/gomod/kubernetes/go.mod" \
    || die "hack/gomod/kubernetes/go.mod does not pin $KUBELET_VERSION (keep KUBELET_VERSION = KUBE_VERSION)"
  # Own scratch copy of the wrapper module: build-binaries.sh may be using its own at the same time.
  local dir="$BUILD_ROOT/kubelet" out date ldf="" k t0 minor
  mkdir -p "$dir"; out="$dir/out"; rm -rf "$out"; mkdir -p "$out"
  cp -f "$HACK_DIR/gomod/kubernetes/go.mod" "$HACK_DIR/gomod/kubernetes/go.sum" "$dir/"
  minor="$(echo "$KUBELET_VERSION" | cut -d. -f2)"
  date="$(cd "$dir" && go list -m -json "k8s.io/kubernetes@$KUBELET_VERSION" 2>/dev/null \
          | awk -F'"' '$2 == "Time" && !t {t = $4} END {print t}')" || date=""
  date="${date:-1970-01-01T00:00:00Z}"
  for k in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldf+=" -X '$k.gitVersion=$KUBELET_VERSION' -X '$k.gitMajor=1' -X '$k.gitMinor=$minor'"
    ldf+=" -X '$k.gitTreeState=clean' -X '$k.buildDate=$date'"
  done
  log "kubelet $KUBELET_VERSION: building (-p $GO_P; shares the Go build cache with the control plane)"
  t0=$SECONDS
  (cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -p "$GO_P" -trimpath \
      -ldflags "-s -w $ldf" -o "$out/kubelet" k8s.io/kubernetes/cmd/kubelet) || die "go build of kubelet failed"
  log "kubelet $KUBELET_VERSION: built in $((SECONDS - t0)) s"
  mkdir -p "$(dirname "$KUBELET")"
  mv -f "$out/kubelet" "$KUBELET.tmp.$$" && chmod 0755 "$KUBELET.tmp.$$" && mv -f "$KUBELET.tmp.$$" "$KUBELET"
  kubelet_ok || die "kubelet at $KUBELET does not report $KUBELET_VERSION"
  log "  kubelet -> $KUBELET ($(du -h "$KUBELET" | cut -f1))"
}

main() {
  case "${1:-}" in
    --print) echo "kubelet $KUBELET"; exit 0 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    "") ;;
    *) die "unknown argument $1" ;;
  esac
  command -v go >/dev/null || die "go is not installed"
  export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
  mkdir -p "$CACHE" "$BUILD_ROOT"
  KUBEGAN_DEBIAN_PACKAGES="$DEBIAN_NODE_PACKAGES" bash "$HACK_DIR/install-debian-packages.sh"
  exec 9>"$CACHE/.lock-node"
  if ! flock -n 9; then log "another build holds $CACHE/.lock-node; waiting"; flock 9; fi
  build_kubelet
}

main "$@"
