# shellcheck shell=bash
# Sourced by the hack/build-*.sh scripts that run `go`: Go's build and module caches for
# kubegan's builds live under kubegan's own cache, not the user's (~/.cache/go-build, ~/go),
# so that `make install` can drop them once every binary is built (hack/drop-go-caches.sh):
# they were 13 GB on disk after a cold install, and the binaries are cached by version.
export GOCACHE="${KUBEGAN_GOCACHE:-$HOME/.cache/kubegan/go/build}"
export GOMODCACHE="${KUBEGAN_GOMODCACHE:-$HOME/.cache/kubegan/go/mod}"
# Two builds may run at once (`make test` builds the cluster add-ons in one lane and BuildKit in
# another): each holds this lock shared while it runs, and drop-go-caches.sh drops the caches
# only when it gets the lock alone, so it never pulls the caches from under a running build.
KUBEGAN_GO_LOCK="${KUBEGAN_GO_LOCK:-$HOME/.cache/kubegan/go.lock}"
mkdir -p "$(dirname "$KUBEGAN_GO_LOCK")"
if [[ "${KUBEGAN_GO_LOCK_MODE:-shared}" == shared ]]; then
  exec {KUBEGAN_GO_LOCK_FD}>>"$KUBEGAN_GO_LOCK"
  flock -s "$KUBEGAN_GO_LOCK_FD"
fi
