#!/usr/bin/env bash
# Installs uv at the version pyproject.toml requires ([tool.uv] required-version), into a cache
# outside the repo (~/.cache/kubegan/tools/uv-<version>), and prints the path of its binary.
# Idempotent: reuses the cached one when it reports that version. Like every other Python
# package of the project, uv is installed only with its hashes: requirements/uv.txt
# (hack/lock.sh; `hack/lock.sh --uv` after the required version changes).
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$(sed -n 's/^required-version = "==\(.*\)"$/\1/p' "$REPO_ROOT/pyproject.toml")"
[[ -n "$version" ]] || { echo "install-uv: no [tool.uv] required-version in pyproject.toml" >&2; exit 1; }
pins="$REPO_ROOT/requirements/uv.txt"
grep -qx "uv==$version \\\\" "$pins" \
  || { echo "install-uv: $pins does not pin uv $version (pyproject.toml); run hack/lock.sh --uv" >&2; exit 1; }
dir="${KUBEGAN_TOOLS_CACHE:-$HOME/.cache/kubegan/tools}/uv-$version"
uv="$dir/bin/uv"
if [[ ! -x "$uv" ]] || [[ "$("$uv" --version 2>/dev/null)" != "uv $version"* ]]; then
  rm -rf "$dir"
  python3 -m venv "$dir" >&2
  "$dir/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$pins" >&2
fi
echo "$uv"
