#!/usr/bin/env bash
# Configures and builds mpibert into build/ (binaries in build/bin/): every target, or only those
# named (scripts/main_job.sh builds mpibert and mpibert-prep alone). Compiles through ccache when
# it is installed.
#   scripts/build.sh [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache >/dev/null; then
  # The precompiled LibTorch header is compiled through ccache too: it needs these sloppinesses.
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_COMMAND:-cmake};-E;env;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;ccache")
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" > build.log 2>&1 || { cat build.log; exit 1; }
targets=()
[ $# -eq 0 ] || targets=(--target "$@")
cmake --build build -j "$(nproc)" "${targets[@]}" >> build.log 2>&1 || { tail -50 build.log; exit 1; }
echo "build: binaries in $(pwd)/build/bin"
