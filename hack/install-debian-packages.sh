#!/usr/bin/env bash
# Debian packages the tests need that no Python/Go registry ships:
#   prometheus  — the real Prometheus server and promtool (tests/monitoring/).
#   ShellCheck  — the shell scripts' lint (package shellcheck; tests/helm/test_shellcheck.py).
# Idempotent: does nothing when every package is already installed. The Debian package
# enables a systemd service; the tests never use it (they start their own `prometheus` on a
# free port with a temporary config and storage), so we do not start or enable anything.
# KUBEGAN_DEBIAN_PACKAGES="a b c" installs that list instead (hack/build-node-binaries.sh uses
# it for containerd, runc and the CNI plugins; their services are not started either).
set -euo pipefail

read -ra PACKAGES <<<"${KUBEGAN_DEBIAN_PACKAGES:-prometheus shellcheck}"
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$pkg")
done
# Debian's stable releases take only security and point-release fixes, so a version pin would
# break on every point release; the versions in use are printed instead, for every run's log.
print_versions() {
  dpkg-query -W -f='install-debian-packages: ${Package} ${Version} (${Architecture})\n' "${PACKAGES[@]}"
}
if [[ ${#missing[@]} -eq 0 ]]; then
  print_versions
  exit 0
fi

SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: forbid maintainer scripts from starting the service during the install.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  created_policy=1
fi
cleanup() { if [[ $created_policy -eq 1 ]]; then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-debian-packages: installed ${missing[*]}"
print_versions
