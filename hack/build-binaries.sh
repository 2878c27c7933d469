#!/usr/bin/env bash
# Build (or reuse from a cache outside the repo) the pinned binaries of the local
# control plane: kube-apiserver, kube-scheduler, kube-controller-manager, kubectl,
# etcd, etcdctl, kwok, helm, and actionlint (the lint tier checks .github/workflows with it);
# for `make push` and the e2e tier's registry: crane (pushes the OCI layout's images) and the
# CNCF distribution registry.
# Everything comes from the Go module proxy; no Docker, no release tarballs.
#
# Usage:
#   hack/build-binaries.sh                 build what is missing from the cache
#   hack/build-binaries.sh --link DIR      ... then symlink every binary into DIR
#   hack/build-binaries.sh --print         print "<name> <path>" for every binary
#   hack/build-binaries.sh --regen-gomod   rewrite hack/gomod/kubernetes/go.mod from
#                                          the pinned k8s.io/kubernetes release's go.mod
#
# Environment:
#   KUBEGAN_BIN_CACHE   cache root (default ~/.cache/kubegan/bin); each binary lives
#                       in <cache>/<component>-<version>/<component>
#   KUBEGAN_BUILD_DIR   scratch dir for the wrapper modules (default ~/.cache/kubegan/build)
#   KUBEGAN_GO_P        go build -p (default 2; each k8s link takes a few GB of RAM)
#   KUBEGAN_FORCE_BUILD=1  rebuild even if cached
#
# Pinned versions (change here and in hack/gomod/*/go.mod together):
KUBE_VERSION=v1.36.3      # k8s.io/kubernetes; staging modules at v0.36.3
ETCD_VERSION=v3.6.8       # what k8s v1.36.3 pins in build/dependencies.yaml
KWOK_VERSION=v0.8.0       # sigs.k8s.io/kwok (go 1.26.0 directive)
HELM_VERSION=v3.22.0      # helm.sh/helm/v3
ACTIONLINT_VERSION=v1.7.12  # github.com/rhysd/actionlint
CRANE_VERSION=v0.22.1     # github.com/google/go-containerregistry (cmd/crane)
REGISTRY_VERSION=v3.1.2   # github.com/distribution/distribution/v3 (cmd/registry)

set -Eeuo pipefail
# Go caches under ~/.cache/kubegan/go (make install drops them after the builds).
source "$(dirname "${BASH_SOURCE[0]}")/go-env.sh"
trap 'echo "build-binaries.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${KUBEGAN_BIN_CACHE:-$HOME/.cache/kubegan/bin}"
BUILD_ROOT="${KUBEGAN_BUILD_DIR:-$HOME/.cache/kubegan/build}"
GO_P="${KUBEGAN_GO_P:-2}"
FORCE="${KUBEGAN_FORCE_BUILD:-0}"

STAGING_VERSION="v0.${KUBE_VERSION#v1.}"          # v1.36.3 -> v0.36.3
KUBE_MAJOR=1
KUBE_MINOR="$(echo "$KUBE_VERSION" | cut -d. -f2)"
KUBE_BINS=(kube-apiserver kube-scheduler kube-controller-manager kubectl)
ALL_BINS=("${KUBE_BINS[@]}" etcd etcdctl kwok helm actionlint crane registry)

log() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-binaries] ERROR: %s\n' "$*" >&2; exit 1; }

version_of() {
  case "$1" in
    kube-*|kubectl) echo "$KUBE_VERSION" ;;
    etcd|etcdctl)   echo "$ETCD_VERSION" ;;
    kwok)           echo "$KWOK_VERSION" ;;
    helm)           echo "$HELM_VERSION" ;;
    actionlint)     echo "$ACTIONLINT_VERSION" ;;
    crane)          echo "$CRANE_VERSION" ;;
    registry)       echo "$REGISTRY_VERSION" ;;
    *) die "unknown component $1" ;;
  esac
}
path_of() { echo "$CACHE/$1-$(version_of "$1")/$1"; }

# Prints the first line of a binary's version output; fails if it does not run.
# (No `| head`: with pipefail, SIGPIPE in the binary would count as a failure.)
run_version() {
  local bin="$1" name="$2" out
  case "$name" in
    kubectl) out="$("$bin" version --client 2>&1)" ;;
    etcdctl) out="$("$bin" version 2>&1)" ;;
    helm)    out="$("$bin" version --short 2>&1)" ;;
    actionlint) out="$("$bin" -version 2>&1)" ;;
    crane)   out="$("$bin" version 2>&1)" ;;
    *)       out="$("$bin" --version 2>&1)" ;;
  esac || return 1
  printf '%s\n' "${out%%$'\n'*}"
}

# A binary is good when it exists, runs, and reports the pinned version.
version_ok() {
  local name="$1" p out want
  p="$(path_of "$name")"
  [[ -x "$p" ]] || return 1
  out="$(run_version "$p" "$name")" || return 1
  want="$(version_of "$name")"; want="${want#v}"
  [[ "$out" == *"$want"* ]] || { log "$name at $p reports '$out', want $want"; return 1; }
}
is_cached() { [[ "$FORCE" != 1 ]] && version_ok "$1"; }

install_bin() {  # install_bin <built-file> <name>
  local src="$1" name="$2" dst
  dst="$(path_of "$name")"
  mkdir -p "$(dirname "$dst")"
  mv -f "$src" "$dst.tmp.$$" && chmod 0755 "$dst.tmp.$$" && mv -f "$dst.tmp.$$" "$dst"
  log "  $name -> $dst ($(du -h "$dst" | cut -f1), $(run_version "$dst" "$name"))"
}

# Copy a committed wrapper module into the scratch dir; after the build copy back
# go.mod/go.sum if resolution changed them (so the repo keeps the resolved go.sum).
prepare_wrapper() {  # prepare_wrapper <name> -> echoes build dir
  local name="$1" src="$HACK_DIR/gomod/$1" dir="$BUILD_ROOT/$1"
  [[ -f "$src/go.mod" ]] || die "missing $src/go.mod"
  mkdir -p "$dir"
  cp -f "$src/go.mod" "$dir/go.mod"
  if [[ -f "$src/go.sum" ]]; then cp -f "$src/go.sum" "$dir/go.sum"; else rm -f "$dir/go.sum"; fi
  echo "$dir"
}
sync_wrapper_back() {
  local name="$1" src="$HACK_DIR/gomod/$1" dir="$BUILD_ROOT/$1" f
  for f in go.mod go.sum; do
    if [[ -f "$dir/$f" ]] && ! cmp -s "$dir/$f" "$src/$f" 2>/dev/null; then
      if [[ -w "$src" ]]; then
        cp -f "$dir/$f" "$src/$f"
        log "  updated hack/gomod/$name/$f (commit it for reproducible builds)"
      fi
    fi
  done
}

release_date() {  # release_date <module@version> -> RFC3339 UTC from the proxy's .info
  local t
  t="$(go list -m -json "$1" 2>/dev/null | awk -F'"' '$2 == "Time" && !t {t = $4} END {print t}')" || t=""
  echo "${t:-1970-01-01T00:00:00Z}"
}

regen_gomod() {
  log "regenerating hack/gomod/kubernetes/go.mod for k8s.io/kubernetes $KUBE_VERSION"
  local info dir
  info="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION")" || die "cannot download k8s.io/kubernetes@$KUBE_VERSION"
  dir="$(echo "$info" | sed -n 's/.*"GoMod": *"\([^"]*\)".*/\1/p')"
  [[ -f "$dir" ]] || die "no go.mod for k8s.io/kubernetes@$KUBE_VERSION"
  {
    echo "// Wrapper module: builds k8s.io/kubernetes binaries from the Go module proxy."
    echo "// Generated by hack/build-binaries.sh --regen-gomod from k8s.io/kubernetes $KUBE_VERSION's go.mod."
    echo "// Staging modules are required at v0.0.0 upstream; pin each to its published tag."
    echo "module kubegan.local/k8s-binaries"
    echo
    echo "go $(sed -n 's/^go //p' "$dir")"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    sed -n '/^replace (/,/^)/p' "$dir" | awk -v v="$STAGING_VERSION" '/=>/{printf "\t%s => %s %s\n", $1, $1, v}'
    echo ")"
  } > "$HACK_DIR/gomod/kubernetes/go.mod"
  rm -f "$HACK_DIR/gomod/kubernetes/go.sum"
  log "wrote hack/gomod/kubernetes/go.mod; the next build resolves go.sum"
}

build_kube() {
  local missing=() b
  for b in "${KUBE_BINS[@]}"; do is_cached "$b" || missing+=("$b"); done
  if ((${#missing[@]} == 0)); then log "kubernetes $KUBE_VERSION: cached (${KUBE_BINS[*]})"; return; fi
  grep -q "k8s.io/kubernetes $KUBE_VERSION" "$HACK_DIR/gomod/kubernetes/go.mod" \
    || die "hack/gomod/kubernetes/go.mod does not pin $KUBE_VERSION; run $0 --regen-gomod"
  local dir out pkgs=() date ldf="" k t0
  dir="$(prepare_wrapper kubernetes)"
  out="$dir/out"; rm -rf "$out"; mkdir -p "$out"
  for b in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  date="${SOURCE_DATE_EPOCH:+$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)}"
  [[ -n "$date" ]] || date="$(cd "$dir" && release_date "k8s.io/kubernetes@$KUBE_VERSION")"
  for k in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldf+=" -X '$k.gitVersion=$KUBE_VERSION' -X '$k.gitMajor=$KUBE_MAJOR' -X '$k.gitMinor=$KUBE_MINOR'"
    ldf+=" -X '$k.gitTreeState=clean' -X '$k.buildDate=$date'"
  done
  log "kubernetes $KUBE_VERSION: downloading modules (staging $STAGING_VERSION)"
  (cd "$dir" && GOFLAGS=-mod=mod go mod download k8s.io/kubernetes) || die "go mod download failed"
  log "kubernetes $KUBE_VERSION: building ${missing[*]} (-p $GO_P; a cold build took ~5 min on 2 cores, more on slower machines)"
  t0=$SECONDS
  (cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -p "$GO_P" -trimpath \
      -ldflags "-s -w $ldf" -o "$out/" "${pkgs[@]}") || die "go build of kubernetes binaries failed"
  log "kubernetes $KUBE_VERSION: built in $((SECONDS - t0)) s"
  sync_wrapper_back kubernetes
  for b in "${missing[@]}"; do install_bin "$out/$b" "$b"; done
}

build_etcd() {
  local missing=() b
  for b in etcd etcdctl; do is_cached "$b" || missing+=("$b"); done
  if ((${#missing[@]} == 0)); then log "etcd $ETCD_VERSION: cached"; return; fi
  grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION" "$HACK_DIR/gomod/etcd/go.mod" \
    || die "hack/gomod/etcd/go.mod does not pin etcd $ETCD_VERSION"
  local dir out t0
  dir="$(prepare_wrapper etcd)"
  out="$dir/out"; rm -rf "$out"; mkdir -p "$out"
  log "etcd $ETCD_VERSION: building ${missing[*]}"
  t0=$SECONDS
  for b in "${missing[@]}"; do
    local pkg=go.etcd.io/etcd/server/v3
    [[ "$b" == etcdctl ]] && pkg=go.etcd.io/etcd/etcdctl/v3
    (cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -p "$GO_P" -trimpath \
        -ldflags "-s -w" -o "$out/$b" "$pkg") || die "go build of $b failed"
  done
  log "etcd $ETCD_VERSION: built in $((SECONDS - t0)) s"
  sync_wrapper_back etcd
  for b in "${missing[@]}"; do install_bin "$out/$b" "$b"; done
}

go_install() {  # go_install <name> <pkg@version> <ldflags>
  local name="$1" pkgv="$2" ldf="$3" gobin t0
  if is_cached "$name"; then log "$name $(version_of "$name"): cached"; return; fi
  gobin="$BUILD_ROOT/gobin-$name"; rm -rf "$gobin"; mkdir -p "$gobin"
  log "$name: go install $pkgv"
  t0=$SECONDS
  # go install pkg@version ignores the surrounding module and uses the release's go.sum.
  (cd "$BUILD_ROOT" && CGO_ENABLED=0 GOBIN="$gobin" GOFLAGS="" go install -p "$GO_P" -trimpath \
      -ldflags "-s -w $ldf" "$pkgv") || die "go install $pkgv failed"
  log "$name: built in $((SECONDS - t0)) s"
  install_bin "$gobin/$name" "$name"
}

link_into() {
  local dest="$1" b
  mkdir -p "$dest"
  for b in "${ALL_BINS[@]}"; do
    [[ -x "$(path_of "$b")" ]] || die "$b missing from cache"
    ln -sfn "$(path_of "$b")" "$dest/$b"
  done
  log "linked ${ALL_BINS[*]} into $dest"
}

main() {
  local link="" mode=build
  while (($#)); do
    case "$1" in
      --link) link="${2:?--link needs a directory}"; shift 2 ;;
      --print) mode=print; shift ;;
      --regen-gomod) mode=regen; shift ;;
      -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
      *) die "unknown argument $1" ;;
    esac
  done
  command -v go >/dev/null || die "go is not installed"
  export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
  mkdir -p "$CACHE" "$BUILD_ROOT"
  case "$mode" in
    regen) regen_gomod; exit 0 ;;
    print) for b in "${ALL_BINS[@]}"; do echo "$b $(path_of "$b")"; done; exit 0 ;;
  esac

  # One builder at a time per cache (cluster-up and a manual build may race).
  exec 9>"$CACHE/.lock"
  if ! flock -n 9; then log "another build holds $CACHE/.lock; waiting"; flock 9; fi

  local t0=$SECONDS
  log "go: $(go version); cache: $CACHE; -p $GO_P"
  build_etcd
  go_install kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" \
    "-X 'sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}' -X 'sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBE_VERSION#v}'"
  go_install helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
    "-X 'helm.sh/helm/v3/internal/version.version=$HELM_VERSION' -X 'helm.sh/helm/v3/internal/version.gitTreeState=clean'"
  # actionlint reads its version from the module's build info (go install pkg@version).
  go_install actionlint "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION" ""
  # crane reports the module version go install records; the registry its version package's.
  go_install crane "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION" ""
  go_install registry "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION" \
    "-X 'github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION'"
  build_kube
  local b
  for b in "${ALL_BINS[@]}"; do version_ok "$b" || die "$b at $(path_of "$b") does not run or has the wrong version"; done
  log "all binaries ready in $((SECONDS - t0)) s"
  [[ -z "$link" ]] || link_into "$link"
}

main "$@"
