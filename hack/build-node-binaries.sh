#!/usr/bin/env bash
# Build / install what a *real* node of the local cluster needs (work in progress):
#   kubelet,           built from the Go module proxy through hack/gomod/kubernetes/ (the
#   kube-proxy         same wrapper module and pins as the control plane), cached by version
#                      in ~/.cache/kubegan/bin/<name>-<version>/<name>
#   coredns            built through hack/gomod/coredns/ (a main with only the plugins the
#                      local cluster uses), cached in ~/.cache/kubegan/bin/coredns-<version>/
#   kube-router        its NetworkPolicy controller only (iptables + ipset), so the real nodes
#                      enforce the per-job NetworkPolicy; test infrastructure, never shipped.
#                      cached in ~/.cache/kubegan/bin/kube-router-<version>/
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
COREDNS_VERSION=v1.14.7  # must match hack/gomod/coredns/go.mod
# Prometheus with kubernetes service discovery, for the e2e tier's metrics test: Debian's
# package is built without it. Go module v0.316.0 = Prometheus 3.16.0; the build tags keep
# only the kubernetes discoverer (no cloud SDKs).
PROMETHEUS_MODULE_VERSION=v0.316.0
PROMETHEUS_TAGS=remove_all_sd,enable_kubernetes_sd
# kube-router v2.1.0: the only v2 release the Go module proxy here serves (see hack/README.md).
# Its policy dataplane is iptables + ipset, which this kernel has; kube-network-policies needs
# nfqueue (CONFIG_NFT_QUEUE), which it lacks.
KUBE_ROUTER_VERSION=v2.1.0
DEBIAN_NODE_PACKAGES="containerd runc containernetworking-plugins iptables ipset conntrack socat busybox-static procps"

set -Eeuo pipefail
# Go caches under ~/.cache/kubegan/go (make install drops them after the builds).
source "$(dirname "${BASH_SOURCE[0]}")/go-env.sh"
trap 'echo "build-node-binaries.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${KUBEGAN_BIN_CACHE:-$HOME/.cache/kubegan/bin}"
BUILD_ROOT="${KUBEGAN_BUILD_DIR:-$HOME/.cache/kubegan/build}"
GO_P="${KUBEGAN_GO_P:-2}"
FORCE="${KUBEGAN_FORCE_BUILD:-0}"
KUBELET="$CACHE/kubelet-$KUBELET_VERSION/kubelet"
KUBE_PROXY="$CACHE/kube-proxy-$KUBELET_VERSION/kube-proxy"
COREDNS="$CACHE/coredns-$COREDNS_VERSION/coredns"
PROMETHEUS_DIR="$CACHE/prometheus-$PROMETHEUS_MODULE_VERSION"
KUBE_ROUTER="$CACHE/kube-router-$KUBE_ROUTER_VERSION/kube-router"

log() { printf '[build-node-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-node-binaries] ERROR: %s\n' "$*" >&2; exit 1; }

k8s_binary_ok() {  # k8s_binary_ok <path>: runs and reports the pinned version
  local bin="$1" out
  [[ -x "$bin" ]] || return 1
  out="$("$bin" --version 2>&1)" || return 1
  [[ "$out" == "Kubernetes $KUBELET_VERSION" ]] || { log "$bin reports '$out'"; return 1; }
}

build_k8s_binary() {  # build_k8s_binary <name> <path>: k8s.io/kubernetes/cmd/<name>
  local name="$1" bin="$2"
  if [[ "$FORCE" != 1 ]] && k8s_binary_ok "$bin"; then log "$name $KUBELET_VERSION: cached ($bin)"; return; fi
  grep -q "k8s.io/kubernetes $KUBELET_VERSION" "$HACK_DIR/gomod/kubernetes/go.mod" \
    || die "hack/gomod/kubernetes/go.mod does not pin $KUBELET_VERSION (keep KUBELET_VERSION = KUBE_VERSION)"
  # Own scratch copy of the wrapper module: build-binaries.sh may be using its own at the same time.
  local dir="$BUILD_ROOT/$name" out date ldf="" k t0 minor
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
  log "$name $KUBELET_VERSION: building (-p $GO_P; shares the Go build cache with the control plane)"
  t0=$SECONDS
  (cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -p "$GO_P" -trimpath \
      -ldflags "-s -w $ldf" -o "$out/$name" "k8s.io/kubernetes/cmd/$name") || die "go build of $name failed"
  log "$name $KUBELET_VERSION: built in $((SECONDS - t0)) s"
  mkdir -p "$(dirname "$bin")"
  mv -f "$out/$name" "$bin.tmp.$$" && chmod 0755 "$bin.tmp.$$" && mv -f "$bin.tmp.$$" "$bin"
  k8s_binary_ok "$bin" || die "$name at $bin does not report $KUBELET_VERSION"
  log "  $name -> $bin ($(du -h "$bin" | cut -f1))"
}

coredns_ok() {
  local out
  [[ -x "$COREDNS" ]] || return 1
  out="$("$COREDNS" -version 2>&1)" || return 1
  [[ "$out" == "CoreDNS-${COREDNS_VERSION#v}"* ]]
}

build_coredns() {
  if [[ "$FORCE" != 1 ]] && coredns_ok; then log "coredns $COREDNS_VERSION: cached ($COREDNS)"; return; fi
  grep -q "github.com/coredns/coredns $COREDNS_VERSION" "$HACK_DIR/gomod/coredns/go.mod" \
    || die "hack/gomod/coredns/go.mod does not pin $COREDNS_VERSION"
  local dir="$BUILD_ROOT/coredns" t0
  rm -rf "$dir"; mkdir -p "$dir"
  cp -f "$HACK_DIR/gomod/coredns/"{go.mod,go.sum,main.go} "$dir/"
  log "coredns $COREDNS_VERSION: building (-p $GO_P)"
  t0=$SECONDS
  (cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -p "$GO_P" -trimpath -ldflags "-s -w" \
      -o "$dir/coredns" .) || die "go build of coredns failed"
  if ! cmp -s "$dir/go.sum" "$HACK_DIR/gomod/coredns/go.sum"; then
    cp -f "$dir/go.sum" "$HACK_DIR/gomod/coredns/go.sum"; log "updated hack/gomod/coredns/go.sum (commit it)"
  fi
  log "coredns $COREDNS_VERSION: built in $((SECONDS - t0)) s"
  mkdir -p "$(dirname "$COREDNS")"
  mv -f "$dir/coredns" "$COREDNS.tmp.$$" && mv -f "$COREDNS.tmp.$$" "$COREDNS"
  coredns_ok || die "coredns at $COREDNS does not report $COREDNS_VERSION"
}

prometheus_ok() {  # both binaries there, and promtool knows kubernetes_sd_configs
  local probe
  [[ -x "$PROMETHEUS_DIR/prometheus" && -x "$PROMETHEUS_DIR/promtool" ]] || return 1
  probe="$(mktemp)"
  printf 'scrape_configs:\n- job_name: probe\n  kubernetes_sd_configs: [{role: pod, api_server: "https://127.0.0.1:1"}]\n' >"$probe"
  "$PROMETHEUS_DIR/promtool" check config --syntax-only "$probe" >/dev/null 2>&1; local rc=$?
  rm -f "$probe"; return "$rc"
}

build_prometheus() {
  if [[ "$FORCE" != 1 ]] && prometheus_ok; then log "prometheus $PROMETHEUS_MODULE_VERSION: cached ($PROMETHEUS_DIR)"; return; fi
  local out="$BUILD_ROOT/prometheus-bin" t0 cmd
  rm -rf "$out"; mkdir -p "$out"
  log "prometheus $PROMETHEUS_MODULE_VERSION: building prometheus and promtool (-tags $PROMETHEUS_TAGS; ~7 min cold)"
  t0=$SECONDS
  for cmd in prometheus promtool; do
    GOBIN="$out" CGO_ENABLED=0 go install -p "$GO_P" -trimpath -ldflags "-s -w" -tags "$PROMETHEUS_TAGS" \
      "github.com/prometheus/prometheus/cmd/$cmd@$PROMETHEUS_MODULE_VERSION" || die "go install of $cmd failed"
  done
  log "prometheus $PROMETHEUS_MODULE_VERSION: built in $((SECONDS - t0)) s"
  mkdir -p "$PROMETHEUS_DIR"
  for cmd in prometheus promtool; do mv -f "$out/$cmd" "$PROMETHEUS_DIR/$cmd"; done
  prometheus_ok || die "promtool at $PROMETHEUS_DIR does not know kubernetes_sd_configs"
}

kube_router_ok() {
  local out
  [[ -x "$KUBE_ROUTER" ]] || return 1
  out="$("$KUBE_ROUTER" --version 2>&1)" || return 1
  [[ "$out" == *"$KUBE_ROUTER_VERSION"* ]]
}

build_kube_router() {
  if [[ "$FORCE" != 1 ]] && kube_router_ok; then log "kube-router $KUBE_ROUTER_VERSION: cached ($KUBE_ROUTER)"; return; fi
  local out="$BUILD_ROOT/kube-router-bin" pkg="github.com/cloudnativelabs/kube-router/v2" t0
  rm -rf "$out"; mkdir -p "$out"
  log "kube-router $KUBE_ROUTER_VERSION: building (-p $GO_P)"
  t0=$SECONDS
  # The version string kube-router prints comes from these two variables (its Makefile sets them).
  GOBIN="$out" CGO_ENABLED=0 go install -p "$GO_P" -trimpath \
    -ldflags "-s -w -X $pkg/pkg/version.Version=$KUBE_ROUTER_VERSION -X $pkg/pkg/version.BuildDate=unknown" \
    "$pkg/cmd/kube-router@$KUBE_ROUTER_VERSION" || die "go install of kube-router failed"
  log "kube-router $KUBE_ROUTER_VERSION: built in $((SECONDS - t0)) s"
  mkdir -p "$(dirname "$KUBE_ROUTER")"
  mv -f "$out/kube-router" "$KUBE_ROUTER.tmp.$$" && mv -f "$KUBE_ROUTER.tmp.$$" "$KUBE_ROUTER"
  kube_router_ok || die "kube-router at $KUBE_ROUTER does not report $KUBE_ROUTER_VERSION"
}

main() {
  case "${1:-}" in
    --print) printf 'kubelet %s\nkube-proxy %s\ncoredns %s\nprometheus %s\npromtool %s\n' "$KUBELET" \
               "$KUBE_PROXY" "$COREDNS" "$PROMETHEUS_DIR/prometheus" "$PROMETHEUS_DIR/promtool"
             printf 'kube-router %s\n' "$KUBE_ROUTER"; exit 0 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    "") ;;
    *) die "unknown argument $1" ;;
  esac
  command -v go >/dev/null || die "go is not installed"
  export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
  mkdir -p "$CACHE" "$BUILD_ROOT"
  KUBEGAN_DEBIAN_PACKAGES="$DEBIAN_NODE_PACKAGES" bash "$HACK_DIR/install-debian-packages.sh"
  exec 9>"$CACHE/.lock-node"
  if ! flock -n 9; then log "another build holds $CACHE/.lock-node; waiting"; flock 9; fi
  build_k8s_binary kubelet "$KUBELET"
  build_k8s_binary kube-proxy "$KUBE_PROXY"
  build_coredns
  build_prometheus
  build_kube_router
}

main "$@"
