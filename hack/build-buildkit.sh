#!/usr/bin/env bash
# Build (or reuse from the cache) buildkitd and buildctl at a pinned version, from the Go
# module proxy, like hack/build-binaries.sh does for the control plane:
#   ~/.cache/kubegan/bin/buildkitd-<version>/buildkitd
#   ~/.cache/kubegan/bin/buildctl-<version>/buildctl
# Used by hack/build-images.sh; buildkitd runs RUN steps with
# Debian's runc (hack/install-debian-packages.sh, see build-images.sh).
#
# Usage:
#   hack/build-buildkit.sh           build what is missing
#   hack/build-buildkit.sh --print   print "<name> <path>"
# Environment: KUBEGAN_BIN_CACHE, KUBEGAN_BUILD_DIR, KUBEGAN_GO_P, KUBEGAN_FORCE_BUILD as in
# hack/build-binaries.sh.
BUILDKIT_VERSION=v0.34.2   # github.com/moby/buildkit (go 1.26.8 directive; no replace directives)

set -Eeuo pipefail
# Go caches under ~/.cache/kubegan/go (make install drops them after the builds).
source "$(dirname "${BASH_SOURCE[0]}")/go-env.sh"
trap 'echo "build-buildkit.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

CACHE="${KUBEGAN_BIN_CACHE:-$HOME/.cache/kubegan/bin}"
BUILD_ROOT="${KUBEGAN_BUILD_DIR:-$HOME/.cache/kubegan/build}"
GO_P="${KUBEGAN_GO_P:-2}"
FORCE="${KUBEGAN_FORCE_BUILD:-0}"
BINS=(buildkitd buildctl)

log() { printf '[build-buildkit %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-buildkit] ERROR: %s\n' "$*" >&2; exit 1; }
path_of() { echo "$CACHE/$1-$BUILDKIT_VERSION/$1"; }

# Good when it runs and reports the pinned version ("buildctl github.com/moby/buildkit v0.34.2 ...").
bin_ok() {
  local p out
  p="$(path_of "$1")"
  [[ -x "$p" ]] || return 1
  out="$("$p" --version 2>&1)" || return 1
  [[ "$out" == *" $BUILDKIT_VERSION "* || "$out" == *" $BUILDKIT_VERSION" ]] \
    || { log "$p reports '$out', want $BUILDKIT_VERSION"; return 1; }
}

main() {
  case "${1:-}" in
    --print) for b in "${BINS[@]}"; do echo "$b $(path_of "$b")"; done; exit 0 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    "") ;;
    *) die "unknown argument $1" ;;
  esac
  local missing=() b
  if [[ "$FORCE" != 1 ]]; then
    for b in "${BINS[@]}"; do bin_ok "$b" || missing+=("$b"); done
  else
    missing=("${BINS[@]}")
  fi
  if ((${#missing[@]} == 0)); then log "buildkit $BUILDKIT_VERSION: cached"; return; fi

  command -v go >/dev/null || die "go is not installed"
  export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
  mkdir -p "$CACHE" "$BUILD_ROOT"
  # One builder per cache (two `make images` at once would build the same thing twice).
  exec 9>"$CACHE/.lock-buildkit"
  if ! flock -n 9; then log "another build holds $CACHE/.lock-buildkit; waiting"; flock 9; fi
  missing=()
  for b in "${BINS[@]}"; do [[ "$FORCE" != 1 ]] && bin_ok "$b" || missing+=("$b"); done
  ((${#missing[@]})) || { log "buildkit $BUILDKIT_VERSION: cached (built by the other holder)"; return; }

  local dir="$BUILD_ROOT/buildkit" t0=$SECONDS ldf dst src
  # `go install pkg@version` refuses buildkit: its go.mod has `exclude` directives. Build it
  # through a scratch wrapper module made from buildkit's own go.mod/go.sum (module line
  # renamed, buildkit itself required): MVS then selects exactly the release's versions and
  # honours its excludes.
  log "buildkit $BUILDKIT_VERSION: downloading the module"
  src="$(cd "$BUILD_ROOT" && GOFLAGS="" go mod download -json "github.com/moby/buildkit@$BUILDKIT_VERSION" \
         | sed -n 's/.*"Dir": *"\([^"]*\)".*/\1/p')"
  [[ -f "$src/go.mod" ]] || die "cannot download github.com/moby/buildkit@$BUILDKIT_VERSION"
  rm -rf "$dir"; mkdir -p "$dir/out"
  sed 's#^module github.com/moby/buildkit$#module kubegan.local/buildkit-build#' "$src/go.mod" >"$dir/go.mod"
  printf '\nrequire github.com/moby/buildkit %s\n' "$BUILDKIT_VERSION" >>"$dir/go.mod"
  cp "$src/go.sum" "$dir/go.sum"; chmod u+w "$dir/go.mod" "$dir/go.sum"
  ldf="-s -w -X github.com/moby/buildkit/version.Version=$BUILDKIT_VERSION"
  ldf+=" -X github.com/moby/buildkit/version.Revision=$BUILDKIT_VERSION"
  log "buildkit $BUILDKIT_VERSION: building ${missing[*]} (-p $GO_P; several minutes cold on 2 cores)"
  # CGO off: static binaries; no seccomp build tag, so RUN steps get no seccomp profile
  # (acceptable for a local build machine).
  for b in "${missing[@]}"; do
    (cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -p "$GO_P" -trimpath \
        -ldflags "$ldf" -o "$dir/out/$b" "github.com/moby/buildkit/cmd/$b") \
      || die "go build of github.com/moby/buildkit/cmd/$b@$BUILDKIT_VERSION failed"
    dst="$(path_of "$b")"
    mkdir -p "$(dirname "$dst")"
    mv -f "$dir/out/$b" "$dst.tmp.$$" && chmod 0755 "$dst.tmp.$$" && mv -f "$dst.tmp.$$" "$dst"
    bin_ok "$b" || die "$dst does not report $BUILDKIT_VERSION"
    log "  $b -> $dst ($(du -h "$dst" | cut -f1))"
  done
  log "buildkit $BUILDKIT_VERSION: built in $((SECONDS - t0)) s"
}

main "$@"
