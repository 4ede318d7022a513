#!/usr/bin/env bash
# Configures and builds mpibert (binaries in BUILD/bin/): every target, or only those named
# (scripts/main_job.sh builds mpibert and mpibert-prep alone). Compiles through ccache when it is
# installed.
#   scripts/build.sh [--asan|--tsan] [TARGET...]
#     (default)  build/, Release, the system compiler
#     --asan     build-asan/, clang, AddressSanitizer + UndefinedBehaviorSanitizer and the libFuzzer
#                harnesses (tests/fuzz): scripts/fuzz.sh and scripts/sanitize.sh use it
#     --tsan     build-tsan/, clang, ThreadSanitizer (scripts/sanitize.sh thread)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
config=(-DCMAKE_BUILD_TYPE=Release)
case "${1:-}" in
  --asan) dir=build-asan; shift
          config=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
                  -DMPIBERT_SANITIZE=address,undefined -DMPIBERT_FUZZ=ON) ;;
  --tsan) dir=build-tsan; shift
          config=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
                  -DMPIBERT_SANITIZE=thread) ;;
esac
launcher=()
if command -v ccache >/dev/null; then
  # The precompiled LibTorch header is compiled through ccache too: it needs these sloppinesses.
  # Paths under the checkout are hashed relative to it, so that another clone or worktree of the
  # same sources (with its own .venv) reuses this one's objects.
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_COMMAND:-cmake};-E;env;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;CCACHE_BASEDIR=$(pwd);ccache")
fi
# Ninja where it is installed (a cluster may lack it), make otherwise; a configured tree keeps its own.
generator=()
if [ ! -f "$dir/CMakeCache.txt" ]; then
  if command -v ninja > /dev/null; then generator=(-G Ninja); else generator=(-G "Unix Makefiles"); fi
fi
log=$dir.log
cmake -S . -B "$dir" "${generator[@]}" "${config[@]}" "${launcher[@]}" > "$log" 2>&1 || { cat "$log"; exit 1; }
targets=()
[ $# -eq 0 ] || targets=(--target "$@")
cmake --build "$dir" -j "$(nproc)" "${targets[@]}" >> "$log" 2>&1 || { tail -50 "$log"; exit 1; }
echo "build: binaries in $(pwd)/$dir/bin"
