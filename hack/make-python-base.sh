#!/usr/bin/env bash
# Make the Python base image for local image builds from Debian packages (no registry is
# reachable here, so python:3.11.13-slim-bookworm cannot be pulled). Debian bookworm's
# python3 is 3.11, the same minor version as the Dockerfile's default PYTHON_IMAGE.
#
#   hack/make-python-base.sh          make it unless cached; print the OCI layout dir
#
# The image is an OCI image layout (one uncompressed layer) in
#   ${KUBEGAN_IMAGE_CACHE:-~/.cache/kubegan/images}/python-base-<key>/
# where <key> hashes this script, the package list, the suite and the mirrors: it is rebuilt
# only when one of those changes (KUBEGAN_REBUILD_BASE=1 forces it). Package versions are
# whatever the mirror has when it is first made. hack/build-images.sh passes it to buildkit
# as a named build context (oci-layout://) and sets PYTHON_IMAGE to that name.
#
# What it has, and why: python3 (3.11), python3-venv (`python -m venv` with ensurepip's pip),
# python-is-python3 (`python`), passwd (groupadd/useradd, in minbase anyway), and what the
# python:slim images have besides: ca-certificates, netbase, tzdata. No pip for the system
# Python; the Dockerfile's runtime stage skips its `pip uninstall` when there is none.
set -Eeuo pipefail
trap 'echo "make-python-base.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

SUITE=bookworm
PACKAGES=python3,python3-venv,python-is-python3,passwd,ca-certificates,netbase,tzdata
MIRRORS=(
  "deb http://deb.debian.org/debian bookworm main"
  "deb http://deb.debian.org/debian bookworm-updates main"
  "deb http://deb.debian.org/debian-security bookworm-security main"
)
IMAGE_NAME=kubegan.local/python-base:3.11-bookworm

IMAGES="${KUBEGAN_IMAGE_CACHE:-$HOME/.cache/kubegan/images}"
log() { printf '[make-python-base %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[make-python-base] ERROR: %s\n' "$*" >&2; exit 1; }

key="$( { cat "${BASH_SOURCE[0]}"; echo "$SUITE $PACKAGES"; printf '%s\n' "${MIRRORS[@]}"; } \
        | sha256sum | cut -c1-16)"
out="$IMAGES/python-base-$key"
mkdir -p "$IMAGES"
exec 8>"$IMAGES/.lock-python-base"
flock 8
if [[ "${KUBEGAN_REBUILD_BASE:-0}" != 1 && -f "$out/index.json" ]]; then
  log "cached: $out"
  echo "$out"; exit 0
fi
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (KUBEGAN_DEBIAN_PACKAGES=mmdebstrap hack/install-debian-packages.sh)"
[[ $(id -u) -eq 0 ]] || die "needs root (mmdebstrap --mode=root)"

t0=$SECONDS
work="$(mktemp -d "$IMAGES/.python-base-tmp.XXXXXX")"
trap 'rm -rf "$work"' EXIT
log "mmdebstrap $SUITE minbase + $PACKAGES"
# No docs, man pages or translations (as in the slim images); no device nodes in the layer
# (the runtime creates /dev); apt's lists and caches are removed by mmdebstrap's cleanup.
# shellcheck disable=SC2016  # the hooks' "$1" is the chroot, expanded by mmdebstrap's shell
mmdebstrap --quiet --variant=minbase --mode=root --format=tar --skip=output/dev \
  --include="$PACKAGES" \
  --aptopt='Acquire::Languages "none"' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook='rm -rf "$1"/var/log/apt/* "$1"/var/log/dpkg.log "$1"/var/cache/ldconfig/aux-cache' \
  --customize-hook='chroot "$1" python --version' \
  "$SUITE" "$work/layer.tar" "${MIRRORS[@]}" >&2 \
  || die "mmdebstrap failed"
pyver="$(tar -xOf "$work/layer.tar" ./var/lib/dpkg/status \
         | awk '/^Package: python3.11$/ {p=1} p && /^Version:/ {print $2; exit}')"

# OCI image layout: blobs/sha256/{layer,config,manifest}, index.json naming the manifest.
mkdir -p "$work/oci/blobs/sha256"
blob() {  # blob <file>: move into the layout, echo "<hex> <size>"
  local h s
  h="$(sha256sum "$1" | cut -d' ' -f1)"; s="$(stat -c %s "$1")"
  mv "$1" "$work/oci/blobs/sha256/$h"; echo "$h $s"
}
read -r layer_h layer_s < <(blob "$work/layer.tar")
created="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
cat >"$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","created":"$created",
 "config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","LANG=C.UTF-8"],
           "Cmd":["python3"],"Labels":{"io.kubegan.python-base.python3.11":"$pyver"}},
 "rootfs":{"type":"layers","diff_ids":["sha256:$layer_h"]},
 "history":[{"created":"$created","created_by":"hack/make-python-base.sh: mmdebstrap $SUITE minbase $PACKAGES"}]}
JSON
read -r cfg_h cfg_s < <(blob "$work/config.json")
cat >"$work/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
 "config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$cfg_h","size":$cfg_s},
 "layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:$layer_h","size":$layer_s}]}
JSON
read -r man_h man_s < <(blob "$work/manifest.json")
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"
cat >"$work/oci/index.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json",
 "manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$man_h","size":$man_s,
   "annotations":{"io.containerd.image.name":"$IMAGE_NAME","org.opencontainers.image.ref.name":"${IMAGE_NAME##*:}"},
   "platform":{"architecture":"amd64","os":"linux"}}]}
JSON
rm -rf "$out"; mv "$work/oci" "$out"
# Older keys are stale bases: remove them so the cache holds one.
find "$IMAGES" -maxdepth 1 -name 'python-base-*' ! -name "python-base-$key" -type d -exec rm -rf {} +
log "made $IMAGE_NAME (python3.11 $pyver, layer $((layer_s / 1048576)) MiB) in $((SECONDS - t0)) s: $out"
echo "$out"
