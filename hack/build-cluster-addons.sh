#!/usr/bin/env bash
# Build (or reuse from the cache) the cluster add-ons the cluster tier runs next to the local
# control plane, at pinned versions, from the Go module proxy, like hack/build-binaries.sh:
#   ~/.cache/kubegan/bin/karpenter-kwok-<version>/karpenter-kwok   Karpenter, KWOK cloud provider
#   ~/.cache/kubegan/bin/karpenter-kwok-<version>/crds/            its CRDs (NodePool, NodeClaim,
#                                                                  KWOKNodeClass, ...)
#   ~/.cache/kubegan/bin/kueue-<version>/kueue                     Kueue's manager
#   ~/.cache/kubegan/bin/kueue-<version>/config/components/        its CRDs, webhook configs, ...
# The manifests are copied next to the binary because the tests install them from there: the
# Go module cache they come from may be cleaned while the binary stays cached.
# tests/support/karpenter.py and tests/support/kueue.py start them for the cluster tier's
# autoscaling and Kueue tests.
#
# Usage:
#   hack/build-cluster-addons.sh           build what is missing
#   hack/build-cluster-addons.sh NAME...   ... of these only (karpenter-kwok, kueue)
#   hack/build-cluster-addons.sh --print   print "<name> <path>" (binaries; manifests beside them)
# Environment: KUBEGAN_BIN_CACHE, KUBEGAN_BUILD_DIR, KUBEGAN_GO_P, KUBEGAN_FORCE_BUILD as in
# hack/build-binaries.sh.
#
# Pinned versions:
KARPENTER_VERSION=v1.15.0   # sigs.k8s.io/karpenter, main package ./kwok (go 1.26.9 directive)
KARPENTER_TOOLCHAIN=go1.27.3  # the one toolchain >= 1.26.9 the module proxy serves here
KUEUE_VERSION=v0.17.1       # sigs.k8s.io/kueue, ./cmd/kueue (go 1.25.0 directive)

set -Eeuo pipefail
# Go caches under ~/.cache/kubegan/go (make install drops them after the builds).
source "$(dirname "${BASH_SOURCE[0]}")/go-env.sh"
trap 'echo "build-cluster-addons.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

CACHE="${KUBEGAN_BIN_CACHE:-$HOME/.cache/kubegan/bin}"
BUILD_ROOT="${KUBEGAN_BUILD_DIR:-$HOME/.cache/kubegan/build}"
GO_P="${KUBEGAN_GO_P:-2}"
FORCE="${KUBEGAN_FORCE_BUILD:-0}"
BINS=(karpenter-kwok kueue)

log() { printf '[build-cluster-addons %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-cluster-addons] ERROR: %s\n' "$*" >&2; exit 1; }

module_of() { case "$1" in karpenter-kwok) echo sigs.k8s.io/karpenter ;; kueue) echo sigs.k8s.io/kueue ;; esac; }
version_of() { case "$1" in karpenter-kwok) echo "$KARPENTER_VERSION" ;; kueue) echo "$KUEUE_VERSION" ;; esac; }
package_of() { case "$1" in karpenter-kwok) echo sigs.k8s.io/karpenter/kwok ;; kueue) echo sigs.k8s.io/kueue/cmd/kueue ;; esac; }
toolchain_of() { case "$1" in karpenter-kwok) echo "$KARPENTER_TOOLCHAIN" ;; *) echo local ;; esac; }
# The manifests each add-on needs (paths inside its module), copied to the same paths beside
# the binary.
manifests_of() {
  case "$1" in
    karpenter-kwok) echo kwok/charts/crds kwok/apis/crds ;;
    kueue) echo config/components/crd config/components/webhook ;;
  esac
}
path_of() { echo "$CACHE/$1-$(version_of "$1")/$1"; }

# Good when the binary's build info names the pinned module version (`go version -m`: the
# binaries print no version of their own without a cluster) and its manifests are there.
bin_ok() {
  local name="$1" p dir m
  p="$(path_of "$name")"; dir="$(dirname "$p")"
  [[ -x "$p" ]] || return 1
  go version -m "$p" 2>/dev/null | grep -Eq "^\s+mod\s+$(module_of "$name")\s+$(version_of "$name")(\s|$)" \
    || { log "$p is not $(module_of "$name") $(version_of "$name")"; return 1; }
  for m in $(manifests_of "$name"); do [[ -d "$dir/$m" ]] || return 1; done
}

build_one() {  # build_one <name>
  local name="$1" mod ver gobin src dst dir t0 m
  mod="$(module_of "$name")"; ver="$(version_of "$name")"
  gobin="$BUILD_ROOT/gobin-$name"; rm -rf "$gobin"; mkdir -p "$gobin"
  log "$name: go install $(package_of "$name")@$ver (GOTOOLCHAIN=$(toolchain_of "$name"); minutes cold on 2 cores)"
  t0=$SECONDS
  # `go install pkg@version` builds with the release's own go.mod/go.sum (no replace or
  # exclude directives in either module), outside any surrounding module.
  (cd "$BUILD_ROOT" && CGO_ENABLED=0 GOBIN="$gobin" GOFLAGS="" GOTOOLCHAIN="$(toolchain_of "$name")" \
      go install -p "$GO_P" -trimpath -ldflags "-s -w" "$(package_of "$name")@$ver") \
    || die "go install $(package_of "$name")@$ver failed"
  log "$name: built in $((SECONDS - t0)) s"
  src="$(cd "$BUILD_ROOT" && GOFLAGS="" GOTOOLCHAIN="$(toolchain_of "$name")" go mod download -json "$mod@$ver" \
         | sed -n 's/.*"Dir": *"\([^"]*\)".*/\1/p')"
  [[ -d "$src" ]] || die "cannot find $mod@$ver in the module cache"
  dst="$(path_of "$name")"; dir="$(dirname "$dst")"
  mkdir -p "$dir"
  for m in $(manifests_of "$name"); do
    [[ -d "$src/$m" ]] || die "$mod@$ver has no $m"
    rm -rf "${dir:?}/$m"; mkdir -p "$dir/$(dirname "$m")"
    cp -r "$src/$m" "$dir/$m"; chmod -R u+w "$dir/$m"
  done
  # The binary goes in last: its presence is what marks the entry complete.
  mv -f "$gobin/$(basename "$(package_of "$name")")" "$dst.tmp.$$"
  chmod 0755 "$dst.tmp.$$" && mv -f "$dst.tmp.$$" "$dst"
  bin_ok "$name" || die "$dst is not $mod $ver"
  log "  $name -> $dst ($(du -h "$dst" | cut -f1))"
}

main() {
  case "${1:-}" in
    --print) for b in "${BINS[@]}"; do echo "$b $(path_of "$b")"; done; exit 0 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    "") ;;
    *) local want=("$@") b
       for b in "${want[@]}"; do [[ " ${BINS[*]} " == *" $b "* ]] || die "unknown add-on $b (known: ${BINS[*]})"; done
       BINS=("${want[@]}") ;;
  esac
  command -v go >/dev/null || die "go is not installed"
  mkdir -p "$CACHE" "$BUILD_ROOT"
  # One builder per cache: two `make install` at once would build the same thing twice.
  exec 9>"$CACHE/.lock-cluster-addons"
  if ! flock -n 9; then log "another build holds $CACHE/.lock-cluster-addons; waiting"; flock 9; fi
  local b
  for b in "${BINS[@]}"; do
    if [[ "$FORCE" != 1 ]] && bin_ok "$b"; then log "$b $(version_of "$b"): cached"; continue; fi
    build_one "$b"
  done
}

main "$@"
