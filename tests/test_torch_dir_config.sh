#!/usr/bin/env bash
# A LibTorch named with -DTorch_DIR goes through its own CMake config (with a CUDA toolkit there,
# which LibTorch's config needs) instead of scripts/libtorch_wheel.cmake's wheel import. Configure
# only. (The build without a CUDA toolkit, from the wheel alone, is build.without_root's: it hides
# the toolkit too.) Registered in ctest as build.torch_dir_config; skipped (77) on a machine with
# no CUDA toolkit, which LibTorch's own config cannot go without.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
python=${MPIBERT_PYTHON:-$root/.venv/bin/python3}
[ -x "$python" ] || fail "$python missing (bash scripts/install-deps.sh)"
[ -d /usr/local/cuda/include ] || { echo "SKIPPED: no CUDA toolkit in /usr/local/cuda, which LibTorch's CMake config needs"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-torch-dir.XXXXXX")
trap 'rm -rf "$work"' EXIT
torch_dir=$("$python" -c 'import importlib.util as u, os; print(os.path.join(u.find_spec("torch").submodule_search_locations[0], "share", "cmake", "Torch"))')
cmake -S "$root" -B "$work/build-config" -G Ninja -DMPIBERT_BUILD_TESTS=OFF -DTorch_DIR="$torch_dir" \
      > "$work/configure-config.log" 2>&1 || { tail -30 "$work/configure-config.log"; fail "configure with -DTorch_DIR failed"; }
grep -q "(its CMake config)" "$work/configure-config.log" || fail "-DTorch_DIR did not go through LibTorch's config"
grep "mpibert:" "$work/configure-config.log"
echo "build.torch_dir_config: passed"
