#!/usr/bin/env bash
# The source build on a bare GPU machine without network (scripts/gpu_check.sh --bundle DIR
# --build-only), played here: a bundle of Debian packages made by scripts/gpu_bundle.sh
# --no-binaries, then, in private mount and network namespaces, Debian's spdlog, CLI11,
# nlohmann-json and utf8proc hidden (every file of their packages, through overlays on /usr/include,
# /usr/lib/x86_64-linux-gnu and /usr/share), no network but loopback, and a python3 at another
# path standing in for the GPU image's /opt/torch/.venv/bin/python3. gpu_check.sh builds
# bench_allreduce there (spdlog, CLI11, nlohmann-json, utf8proc, LibTorch, MPI and NCCL in one
# small program; -DMPIBERT_PCH=OFF, cheaper for one target), which must then run a 1-rank
# all-reduce with the system copies still hidden; its cache, compile commands and the headers
# each object was compiled from (ninja's dependency log) must name the bundle's packages only.
# The build directory ($MPIBERT_GPU_BUNDLE_BUILD, under ctest's build directory) is kept between
# runs: the configure is fresh each time, a rebuild incremental.
# Registered in ctest as build.gpu_bundle; needs root for the namespaces and a CUDA toolkit for
# LibTorch's CMake config (exit 77, ctest's skip, without either). Its wall time: docs/testing.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: hiding packages and the network needs mount and network namespaces, which need root; CI runs as root"; exit 77; }
# A toolkit is an nvcc that runs: a wrapper left on PATH after its toolkit went is none.
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if ! "$nvcc" --version > /dev/null 2>&1; then
  echo "SKIPPED: no CUDA toolkit here ($nvcc --version does not run): the GPU machine's build goes through LibTorch's CMake config, which needs one"
  exit 77
fi
python=${MPIBERT_PYTHON:-$root/.venv/bin/python3}
[ -x "$python" ] || fail "$python missing (bash scripts/install-deps.sh)"
build=${MPIBERT_GPU_BUNDLE_BUILD:-$root/build/gpu-bundle-build}

work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-gpu-bundle.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

# Made where there is network, as on the machine that prepares a GPU machine's bundle.
bash "$root/scripts/gpu_bundle.sh" --no-binaries "$work/bundle"
# The packages to hide: those the bundle brings.
packages=()
for f in "$work/bundle"/debs/*.deb; do packages+=("$(dpkg-deb -f "$f" Package)"); done
[ ${#packages[@]} -gt 0 ] || fail "$work/bundle/debs holds no package"
# The stand-in for /opt/torch/.venv/bin/python3: python3 on PATH, at a path of its own.
mkdir -p "$work/opt-torch/bin"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$python" > "$work/opt-torch/bin/python3"
chmod +x "$work/opt-torch/bin/python3"
# Every file of the packages installed here (their documentation aside): what must vanish.
for p in "${packages[@]}"; do dpkg -L "$p" 2> /dev/null || true; done | { grep -v '^/usr/share/doc' || true; } > "$work/hide.list"

mkdir "$work/overlay"
cat > "$work/inside.sh" <<'INSIDE'
set -euo pipefail
root=$1 work=$2 build=$3
# Overlays over the folders that hold those files, each file then removed in the overlay: gone
# from every lookup (a file mounted over would still exist for CMake and the compiler).
mount -t tmpfs -o size=16m tmpfs "$work/overlay"
for dir in /usr/include /usr/lib/x86_64-linux-gnu /usr/share; do
  name=$(echo "$dir" | tr / _)
  mkdir "$work/overlay/$name.upper" "$work/overlay/$name.work"
  mount -t overlay overlay -o "lowerdir=$dir,upperdir=$work/overlay/$name.upper,workdir=$work/overlay/$name.work" "$dir"
done
# Removals only inside the overlays: anywhere else they would be real.
overlaid() { case $1 in /usr/include/?* | /usr/lib/x86_64-linux-gnu/?* | /usr/share/?*) return 0 ;; esac; return 1; }
while read -r path; do
  if [ -L "$path" ] || [ -f "$path" ]; then
    overlaid "$path" || { echo "$path is outside the overlays: it cannot be hidden"; exit 1; }
    rm -f "$path"
  fi
done < "$work/hide.list"
# The packages' own folders, deepest first, where now empty.
tac "$work/hide.list" | while read -r path; do
  if overlaid "$path" && [ -d "$path" ] && [ -z "$(ls -A "$path")" ]; then rmdir "$path"; fi
done
while read -r path; do
  if [ -L "$path" ] || [ -f "$path" ]; then echo "still visible: $path"; exit 1; fi
done < "$work/hide.list"
for header in spdlog/spdlog.h CLI/CLI.hpp nlohmann/json.hpp utf8proc.h; do
  if echo "#include <$header>" | g++ -x c++ -E - > /dev/null 2>&1; then echo "the compiler still finds <$header>"; exit 1; fi
done
echo "hidden: $(wc -l < "$work/hide.list") paths of Debian's spdlog, CLI11, nlohmann-json and utf8proc; the compiler finds none of their headers"
# No network: loopback alone, up for Open MPI's singleton.
ip link set lo up
interfaces=$(awk 'NR > 2 { sub(":", "", $1); print $1 }' /proc/net/dev | tr '\n' ' ')
[ "$interfaces" = "lo " ] || { echo "network interfaces in the namespace: $interfaces"; exit 1; }
echo "network: loopback only"

export PATH=$work/opt-torch/bin:$PATH
[ "$(command -v python3)" = "$work/opt-torch/bin/python3" ] || { echo "python3 is $(command -v python3), not the stand-in"; exit 1; }
bash "$root/scripts/gpu_check.sh" --bundle "$work/bundle" --build-only --build-dir "$build" --target bench_allreduce \
  -DMPIBERT_PCH=OFF
# Run with the system copies still hidden: the bundle's libraries through gpu_check's LD_LIBRARY_PATH.
source "$root/scripts/env.sh"
libdir=$build/deps/usr/lib/x86_64-linux-gnu
ldd "$build/bin/bench_allreduce" > "$work/ldd.txt"
LD_LIBRARY_PATH=$libdir "$build/bin/bench_allreduce" --backend mpi --min-bytes 1K --max-bytes 1K --warmup 1 --iters 2 \
  > "$work/allreduce.txt" 2>&1 || { cat "$work/allreduce.txt"; echo "bench_allreduce failed (above)"; exit 1; }
grep -q "Out of bounds values : 0 OK" "$work/allreduce.txt" || { cat "$work/allreduce.txt"; echo "bench_allreduce's all-reduce was wrong"; exit 1; }
echo "bench_allreduce ran: a 1-rank all-reduce, 0 wrong"
INSIDE
unshare --mount --net --propagation private bash "$work/inside.sh" "$root" "$work" "$build" \
  || fail "the build from the bundle failed (above)"

# Outside again: what the build was made of.
deps=$build/deps
cache=$build/CMakeCache.txt
cached() { sed -n "s/^$1:[A-Z]*=//p" "$cache"; }
torch_cmake=$("$work/opt-torch/bin/python3" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2> /dev/null)
[ "$(cached Torch_DIR)" = "$torch_cmake/Torch" ] || fail "Torch_DIR is $(cached Torch_DIR), not the stand-in python3's $torch_cmake/Torch"
for var in spdlog_DIR nlohmann_json_DIR CLI11_DIR UTF8PROC_INCLUDE_DIR UTF8PROC_LIBRARY; do
  case $(cached $var) in "$deps"/*) ;; *) fail "$var is $(cached $var), not under $deps" ;; esac
done
grep -q "NCCL backend ON" "$build/configure.log" || fail "the NCCL backend is not ON ($build/configure.log)"
grep -q -E -- "-(I|isystem ?)$deps/usr/include" "$build/compile_commands.json" || fail "no compile command names $deps/usr/include"
# The headers each object was compiled from (ninja's log of the compiler's dependency files).
ninja -C "$build" -t deps > "$work/deps.txt"
for header in spdlog/spdlog.h CLI/CLI.hpp nlohmann/json.hpp utf8proc.h nccl.h; do
  grep -q "/$header\$" "$work/deps.txt" || fail "no object of the build includes $header"
done
for header in spdlog/spdlog.h CLI/CLI.hpp nlohmann/json.hpp utf8proc.h; do
  elsewhere=$(grep "/$header\$" "$work/deps.txt" | grep -v "^ *$deps/usr/include/$header\$" || true)
  [ -z "$elsewhere" ] || fail "an object was compiled from a $header outside $deps: $(echo "$elsewhere" | head -1)"
done
for lib in libspdlog.so.1.10 libutf8proc.so.2; do
  grep -q "$lib => $deps/" "$work/ldd.txt" || fail "bench_allreduce loads $lib from elsewhere: $(grep "$lib" "$work/ldd.txt")"
done
echo "the build used the bundle's spdlog, CLI11, nlohmann-json and utf8proc (cache, compile commands, headers, libraries)," \
     "the stand-in python3's LibTorch and NCCL"
echo "build.gpu_bundle: passed in $(( $(date +%s) - start )) s"
