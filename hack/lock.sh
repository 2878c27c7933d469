#!/usr/bin/env bash
# The lock: uv.lock pins every Python dependency of every extra (one resolution for all of
# them, for the platforms pyproject.toml's [tool.uv] environments name); requirements/*.txt are
# exported from it with hashes for the Dockerfile's images, so that each image installs exactly
# the versions the tests ran with.
#
#   hack/lock.sh            re-export requirements/*.txt from uv.lock (no upgrade)
#   hack/lock.sh --upgrade  resolve again at the newest allowed versions (`make lock`), then export
#   hack/lock.sh --check    fail when uv.lock or an export is out of date (tests/unit/test_lock.py)
#   hack/lock.sh --uv       after a change of pyproject's uv required-version: requirements/uv.txt
#                           (uv itself, with hashes, for hack/install-uv.sh and the Dockerfile)
#                           from a uv of that version installed once without them; review the diff
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
mode="${1:-}"

# image list name -> the extras it is exported with
declare -A EXTRAS=(
  [operator]="operator"
  [torch]="torch"
  [tensorflow]="tensorflow"
  [tensorflow-cuda]="tensorflow tensorflow-cuda"
  [tpu]="tpu"
)

build_requires() {  # pyproject's build-system pins, one per line
  sed -n '/^\[build-system\]/,/^\[/s/^requires = \[\(.*\)\]$/\1/p' pyproject.toml | tr -d '" ' | tr ',' '\n' | grep .
}

export_images() {  # export_images <dir>: the images' lists, from uv.lock alone (no network)
  local name extra args
  for name in "${!EXTRAS[@]}"; do
    args=()
    for extra in ${EXTRAS[$name]}; do args+=(--extra "$extra"); done
    "$UV" export --quiet --frozen --no-dev --no-emit-project --no-header --format requirements-txt \
      "${args[@]}" -o "$1/$name.txt"
  done
}

uv_required() { sed -n 's/^required-version = "==\(.*\)"$/\1/p' pyproject.toml; }

export_uv() {  # uv itself, with the hashes of every file of that release (asks the index)
  printf 'uv==%s\n' "$(uv_required)" | "$UV" pip compile --quiet --no-header --generate-hashes \
    --python-version 3.11 --python-platform x86_64-manylinux_2_28 - -o requirements/uv.txt
}

if [[ "$mode" == --uv ]]; then
  # hack/install-uv.sh installs only the uv that requirements/uv.txt pins, so the first uv of a
  # new version comes from a scratch venv; what it writes is the pin the next installs check.
  scratch="$(mktemp -d)"; trap 'rm -rf "$scratch"' EXIT
  python3 -m venv "$scratch"
  "$scratch/bin/pip" install --quiet --disable-pip-version-check "uv==$(uv_required)"
  UV="$scratch/bin/uv" export_uv
  echo "lock: requirements/uv.txt pins uv $(uv_required)"
  exit 0
fi
UV="${UV:-$(bash hack/install-uv.sh)}"

export_build() {  # the build backend of the kubegan package itself, with hashes (asks the index)
  build_requires | "$UV" pip compile --quiet --no-header --generate-hashes --python-version 3.11 \
    --python-platform x86_64-manylinux_2_28 - -o requirements/build.txt
}

case "$mode" in
  --upgrade) "$UV" lock --upgrade ;;
  --check) "$UV" lock --check ;;
  "") "$UV" lock ;;
  *) echo "usage: hack/lock.sh [--upgrade|--check|--uv]" >&2; exit 2 ;;
esac

if [[ "$mode" == --check ]]; then
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  export_images "$tmp"
  cp requirements/build.txt requirements/uv.txt "$tmp/"
  grep -qx "uv==$(uv_required) \\\\" requirements/uv.txt \
    || { echo "lock: requirements/uv.txt does not pin uv $(uv_required); run hack/lock.sh --uv" >&2; exit 1; }
  diff -r -u "$tmp" requirements >&2 \
    || { echo "lock: requirements/ is out of date with uv.lock; run hack/lock.sh" >&2; exit 1; }
  while read -r pin; do
    grep -qx "$pin \\\\" requirements/build.txt \
      || { echo "lock: requirements/build.txt does not pin $pin; run hack/lock.sh" >&2; exit 1; }
  done < <(build_requires)
  echo "lock: uv.lock and requirements/ are up to date"
else
  export_images requirements
  export_build
  export_uv
  echo "lock: uv.lock and requirements/*.txt written"
fi
