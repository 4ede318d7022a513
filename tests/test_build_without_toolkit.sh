#!/usr/bin/env bash
# A machine without a CUDA toolkit (a CPU box, or a cluster login node before `module load cuda`)
# builds mpibert from the PyTorch wheel alone, with its CUDA and NCCL code: the toolkit is hidden
# in a private mount namespace (a tmpfs over each /usr/local/cuda-*), then a fresh build directory
# is configured and mpibert and mpibert-prep are built and run there, and their libraries resolve
# (scripts/check_runpath.py: the CUDA ones from the wheel's folders). Also: a LibTorch named with
# -DTorch_DIR still goes through its own CMake config, with the toolkit visible.
# Registered in ctest as build.without_cuda_toolkit; needs root for the mount namespace (exit 77,
# ctest's skip, without it). About 2 minutes on 2 cores.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: hiding the CUDA toolkit needs a mount namespace, which needs root; CI runs as root"; exit 77; }
python=${MPIBERT_PYTHON:-$root/.venv/bin/python3}
[ -x "$python" ] || fail "$python missing (bash scripts/install-deps.sh)"

work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-notoolkit.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Inside the namespace: hide every toolkit, show that it is gone, configure, build, run.
cat > "$work/inside.sh" <<'INSIDE'
set -euo pipefail
root=$1 work=$2 python=$3
for toolkit in /usr/local/cuda-*; do
  [ -d "$toolkit" ] && mount -t tmpfs -o size=1m tmpfs "$toolkit"
done
if nvcc --version >/dev/null 2>&1 || [ -e /usr/local/cuda/include/cuda_runtime_api.h ]; then
  echo "the CUDA toolkit is still visible"; exit 1
fi
echo "toolkit hidden: nvcc runs no more, /usr/local/cuda/include is empty"
export CCACHE_DISABLE=1  # compile for real, not from a cache filled with the toolkit visible
cmake -S "$root" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMPIBERT_BUILD_TESTS=OFF \
      -DMPIBERT_PYTHON="$python" > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
grep "mpibert:" "$work/configure.log"
cmake --build "$work/build" -j "$(nproc)" --target mpibert mpibert-prep > "$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log"; exit 1; }
"$work/build/bin/mpibert" env > "$work/env.json"
"$work/build/bin/mpibert-prep" --help > /dev/null
# With the toolkit hidden, every library resolves, and the CUDA ones from the wheel's folders.
for program in mpibert mpibert-prep; do
  /usr/bin/python3 "$root/scripts/check_runpath.py" "$work/build/bin/$program"
done
INSIDE
unshare --mount --propagation private bash "$work/inside.sh" "$root" "$work" "$python" \
  || fail "the build without a CUDA toolkit failed (above)"

grep -q "CUDA 13.0 runtime from .*nvidia.*(no CUDA toolkit needed)" "$work/configure.log" \
  || fail "configure did not take the CUDA runtime from the wheel"
grep -q "NCCL backend ON" "$work/configure.log" || fail "the NCCL backend was not built without the toolkit"
"$python" - "$work/env.json" <<'CHECK' || fail "mpibert env, built without the toolkit, reports the wrong LibTorch or NCCL"
import json, sys
env = json.load(open(sys.argv[1]))
assert env["libtorch"].startswith("2.11"), env
assert env["nccl"] not in (None, "", "none"), env
print(f"mpibert env: libtorch {env['libtorch']}, nccl {env['nccl']}, devices {env['devices']}")
CHECK
# Its programs load the wheel's CUDA libraries, not the toolkit's.
ldd "$work/build/bin/mpibert" | grep -E "libcudart|libnccl|libtorch_cuda" | grep -v "/usr/local/cuda" \
  | sed 's/^/  /' || true
if ldd "$work/build/bin/mpibert" | grep -q "/usr/local/cuda"; then fail "mpibert links a library of /usr/local/cuda"; fi

# The other way in: a LibTorch named by -DTorch_DIR, through its own config (toolkit visible).
torch_dir=$("$python" -c 'import importlib.util as u, os; print(os.path.join(u.find_spec("torch").submodule_search_locations[0], "share", "cmake", "Torch"))')
if [ -d /usr/local/cuda/include ]; then
  cmake -S "$root" -B "$work/build-config" -G Ninja -DMPIBERT_BUILD_TESTS=OFF -DTorch_DIR="$torch_dir" \
        > "$work/configure-config.log" 2>&1 || { tail -30 "$work/configure-config.log"; fail "configure with -DTorch_DIR failed"; }
  grep -q "(its CMake config)" "$work/configure-config.log" || fail "-DTorch_DIR did not go through LibTorch's config"
  grep "mpibert:" "$work/configure-config.log"
else
  echo "no CUDA toolkit on this machine: the -DTorch_DIR configure is not tried"
fi
echo "build.without_cuda_toolkit: passed"
