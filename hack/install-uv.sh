#!/usr/bin/env bash
# Installs uv at the version pyproject.toml requires ([tool.uv] required-version), into a cache
# outside the repo (~/.cache/kubegan/tools/uv-<version>), and prints the path of its binary.
# Idempotent: reuses the cached one when it reports that version.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$(sed -n 's/^required-version = "==\(.*\)"$/\1/p' "$REPO_ROOT/pyproject.toml")"
[[ -n "$version" ]] || { echo "install-uv: no [tool.uv] required-version in pyproject.toml" >&2; exit 1; }
dir="${KUBEGAN_TOOLS_CACHE:-$HOME/.cache/kubegan/tools}/uv-$version"
uv="$dir/bin/uv"
if [[ ! -x "$uv" ]] || [[ "$("$uv" --version 2>/dev/null)" != "uv $version"* ]]; then
  rm -rf "$dir"
  python3 -m venv "$dir" >&2
  "$dir/bin/pip" install --quiet --disable-pip-version-check "uv==$version" >&2
fi
echo "$uv"
