#!/usr/bin/env bash
# Wheels of what bench/gpu_check.py needs beyond torch and numpy, for a GPU machine that has no
# package index: the trainer's config layer (pydantic and its dependencies) and
# prometheus-client, at the versions uv.lock pins, for CPython 3.10-3.13 on manylinux x86_64
# (pydantic-core is compiled; the rest are pure). About 9 MiB. The folder is git-ignored (its
# own .gitignore): name it in the device run's `carry` (bench/README.md).
#
#   bash bench/gpu_wheelhouse.sh            # into bench/wheelhouse
#   GPU_WHEELHOUSE_NUMPY=1 GPU_WHEELHOUSE_PYTHONS=3.12 bash bench/gpu_wheelhouse.sh
#       also numpy (~16 MiB per Python), for a machine whose torch came without it; the
#       Python versions narrowed, so the carried folder stays well under the 64 MiB limit
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$REPO_ROOT/bench/wheelhouse}"
read -r -a pythons <<<"${GPU_WHEELHOUSE_PYTHONS:-3.10 3.11 3.12 3.13}"
packages=(pydantic pydantic-core typing-extensions annotated-types typing-inspection prometheus-client)

# name==version as uv.lock pins it (the [[package]] entry's first two lines).
pin() {
  local v
  v="$(awk -v p="$1" '$0 == "name = \"" p "\"" { getline; gsub(/version = |"/, ""); print; exit }' \
    "$REPO_ROOT/uv.lock")"
  [[ -n "$v" ]] || { echo "gpu-wheelhouse: $1 is not in uv.lock" >&2; exit 1; }
  echo "$1==$v"
}

pins=()
for p in "${packages[@]}"; do pins+=("$(pin "$p")"); done
mkdir -p "$dest"
printf '# bench/gpu_wheelhouse.sh output: wheels, not sources\n*\n' >"$dest/.gitignore"
# --no-deps: the list above is the whole closure (pydantic pins pydantic-core exactly); pip
# would otherwise resolve against this machine's Python, not the target's.
for py in "${pythons[@]}"; do
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
    --platform manylinux2014_x86_64 --implementation cp --python-version "$py" \
    --dest "$dest" "${pins[@]}"
  if [[ "${GPU_WHEELHOUSE_NUMPY:-}" == 1 ]]; then
    # The newest numpy that has a wheel for this Python (the lock's needs 3.11+).
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
      --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --implementation cp \
      --python-version "$py" --dest "$dest" numpy
  fi
done
echo "gpu-wheelhouse: $(find "$dest" -name '*.whl' | wc -l) wheels, $(du -sh "$dest" | cut -f1) in $dest"
