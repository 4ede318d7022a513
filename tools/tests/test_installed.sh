#!/usr/bin/env bash
# The tools as a user installs them (`pip install ./tools`, not from the checkout): the package is
# built into a temporary folder and `mpibert-scaling-model project` runs from another directory,
# reading only what the package carries (its inputs/) and writing into the current directory.
# Runs under MPIBERT_TOOLS_PYTHON (its setuptools builds the package; its matplotlib plots).
set -euo pipefail
python=$(command -v "${MPIBERT_TOOLS_PYTHON:-python3}" || echo "${MPIBERT_TOOLS_PYTHON:-python3}")
case $python in /*) ;; *) python=$(pwd)/$python ;; esac
tools=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A copy of the tools alone: links into the checkout resolve where pip builds it, nowhere after.
cp -rL "$tools" "$work/src"
rm -rf "$work/src/build" "$work/src"/*.egg-info
"$python" -m pip install --quiet --no-deps --no-build-isolation --no-index --target "$work/site" "$work/src" \
  || { echo "FAIL: pip could not install ./tools"; exit 1; }
rm -rf "$work/src"
for f in clusters.json bert-base-config.json bert-large-config.json; do
  [ -f "$work/site/mpibert_tools/inputs/$f" ] && [ ! -L "$work/site/mpibert_tools/inputs/$f" ] \
    || { echo "FAIL: the installed package does not carry inputs/$f"; exit 1; }
done
mkdir "$work/out"
cd "$work/out"
PYTHONPATH="$work/site" "$python" -m mpibert_tools.scaling_model project --no-plot > "$work/log" 2>&1 \
  || { cat "$work/log"; echo "FAIL: mpibert-scaling-model project failed from the installed package"; exit 1; }
[ -s "$work/out/projection.md" ] || { cat "$work/log"; echo "FAIL: no projection.md in the current directory"; exit 1; }
# check needs measured runs, which the package has none of: refused by name.
if PYTHONPATH="$work/site" "$python" -m mpibert_tools.scaling_model check > "$work/log" 2>&1; then
  echo "FAIL: check ran without measured runs"; exit 1
fi
grep -q -- "give --measured DIR" "$work/log" || { cat "$work/log"; echo "FAIL: check's refusal does not name --measured"; exit 1; }
echo "ok: the installed package projects from its own inputs into the current directory"
