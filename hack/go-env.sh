# Sourced by the hack/build-*.sh scripts that run `go`: Go's build and module caches for
# kubegan's builds live under kubegan's own cache, not the user's (~/.cache/go-build, ~/go),
# so that `make install` can drop them once every binary is built (hack/drop-go-caches.sh):
# they were 13 GB on disk after a cold install, and the binaries are cached by version.
export GOCACHE="${KUBEGAN_GOCACHE:-$HOME/.cache/kubegan/go/build}"
export GOMODCACHE="${KUBEGAN_GOMODCACHE:-$HOME/.cache/kubegan/go/mod}"
