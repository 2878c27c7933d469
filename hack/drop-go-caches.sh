#!/usr/bin/env bash
# Drop the Go build and module caches of kubegan's builds (hack/go-env.sh) once the binaries
# they built are in ~/.cache/kubegan/bin, where each is kept by version: they are only needed
# again when a pinned version changes, and then they cost a cold build (minutes) instead of
# 13 GB of disk in the meantime. KUBEGAN_KEEP_GO_CACHE=1 keeps them (for work on the builds).
set -euo pipefail
KUBEGAN_GO_LOCK_MODE=none source "$(dirname "${BASH_SOURCE[0]}")/go-env.sh"
exec {lock_fd}>>"$KUBEGAN_GO_LOCK"
if ! flock -n -x "$lock_fd"; then
  # The build still running drops them when it is done (its make target ends with this script).
  echo "drop-go-caches: kept (another Go build is running)"; exit 0
fi
if [[ "${KUBEGAN_KEEP_GO_CACHE:-0}" == 1 ]]; then
  echo "drop-go-caches: kept (KUBEGAN_KEEP_GO_CACHE=1)"; exit 0
fi
size() {  # what both caches hold; a missing one counts 0
  { du -sb "$GOCACHE" "$GOMODCACHE" 2>/dev/null || true; } | awk '{s += $1} END {printf "%.1f GB", s / 1e9}'
}
before="$(size)"
# `go clean -modcache` removes the module cache's read-only files, which rm -rf cannot.
if [[ -d "$GOCACHE" || -d "$GOMODCACHE" ]] && command -v go >/dev/null; then
  GOTOOLCHAIN=local GOFLAGS="" go clean -cache -modcache
fi
rm -rf "$GOCACHE"
echo "drop-go-caches: freed $before ($GOCACHE, $GOMODCACHE)"
