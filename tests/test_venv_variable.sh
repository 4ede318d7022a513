#!/usr/bin/env bash
# MPIBERT_VENV, which scripts/install-deps.sh installs into, is the environment the build takes
# LibTorch from too: a configure with it set names that environment's Python (here a link to the
# checkout's .venv under another name), and nothing of the checkout's .venv by its own name.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${MPIBERT_VENV:-$root/.venv}
[ -x "$venv/bin/python3" ] || { echo "FAIL: $venv/bin/python3 missing (bash scripts/install-deps.sh)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$(cd "$venv" && pwd)" "$work/another-venv"
MPIBERT_VENV=$work/another-venv cmake -S "$root" -B "$work/build" > "$work/configure.log" 2>&1 \
  || { tail -30 "$work/configure.log"; echo "FAIL: configuring with MPIBERT_VENV=$work/another-venv"; exit 1; }
python=$(sed -n 's/^MPIBERT_PYTHON:FILEPATH=//p' "$work/build/CMakeCache.txt")
[ "$python" = "$work/another-venv/bin/python3" ] \
  || { echo "FAIL: the build took MPIBERT_PYTHON=$python, not MPIBERT_VENV's $work/another-venv/bin/python3"; exit 1; }
grep -q "LibTorch .* from the wheel in $work/another-venv/" "$work/configure.log" \
  || { grep "mpibert:" "$work/configure.log"; echo "FAIL: LibTorch not from MPIBERT_VENV's environment"; exit 1; }
echo "ok: MPIBERT_VENV=$work/another-venv is the build's environment"
