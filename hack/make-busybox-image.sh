#!/usr/bin/env bash
# Write a tiny container image, in `docker save` archive format, made from Debian's
# busybox-static binary (no registry, no Docker). `ctr images import` loads it.
#
#   hack/make-busybox-image.sh OUT.tar NAME:TAG [NAME:TAG ...]
#
# The image has /bin/busybox plus a symlink per applet, /etc/passwd and /etc/group (root,
# nobody) and Entrypoint ["/bin/sh"] (KUBEGAN_IMAGE_ENTRYPOINT, a JSON array, replaces it).
# hack/real-node-up.sh makes it twice: the pod sandbox ("pause") image, whose entrypoint
# sleeps until SIGTERM, and kubegan.local/busybox for test pods. Deterministic: same busybox binary -> same digest.
set -Eeuo pipefail
out="${1:?usage: $0 OUT.tar NAME:TAG...}"; shift
(($#)) || { echo "usage: $0 OUT.tar NAME:TAG..." >&2; exit 2; }
BUSYBOX="${KUBEGAN_BUSYBOX:-/bin/busybox}"
ENTRYPOINT="${KUBEGAN_IMAGE_ENTRYPOINT:-[\"/bin/sh\"]}"   # a JSON array
ldd_out="$(LC_ALL=C ldd "$BUSYBOX" 2>&1 || true)"
[[ -x "$BUSYBOX" && "$ldd_out" == *"not a dynamic executable"* ]] \
  || { echo "make-busybox-image: $BUSYBOX is not a static busybox (apt-get install busybox-static)" >&2; exit 1; }

work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
root="$work/rootfs"; mkdir -p "$root"/{bin,etc,tmp,proc,sys,dev,root}
chmod 1777 "$root/tmp"
cp "$BUSYBOX" "$root/bin/busybox"
for applet in $("$BUSYBOX" --list); do
  [[ "$applet" == busybox ]] || ln -sf busybox "$root/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"

mkdir -p "$work/img"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$work/layer.tar" .
diff_id="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
mkdir -p "$work/img/$diff_id"; mv "$work/layer.tar" "$work/img/$diff_id/layer.tar"
cat >"$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z",
 "config":{"Env":["PATH=/bin"],"Entrypoint":$ENTRYPOINT,"WorkingDir":"/"},
 "rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]},
 "history":[{"created":"1970-01-01T00:00:00Z","created_by":"hack/make-busybox-image.sh ($("$BUSYBOX" 2>&1 | head -n1 | cut -d' ' -f1-2))"}]}
JSON
cfg="$(sha256sum "$work/config.json" | cut -d' ' -f1)"
mv "$work/config.json" "$work/img/$cfg.json"
tags="$(printf '"%s",' "$@")"
printf '[{"Config":"%s.json","RepoTags":[%s],"Layers":["%s/layer.tar"]}]\n' "$cfg" "${tags%,}" "$diff_id" >"$work/img/manifest.json"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/img" -cf "$out" .
echo "make-busybox-image: $out ($(du -h "$out" | cut -f1)) tags: $*" >&2
