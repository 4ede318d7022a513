#!/usr/bin/env bash
# The tree that becomes the image's /opt/mpibert: `cmake --install BUILD` with DESTDIR=DEST and
# prefix /opt/mpibert. The install itself copies the torch wheel's shared libraries that the
# programs load (LibTorch, and the CUDA libraries it links) into /opt/mpibert/lib/mpibert/wheel
# in the wheel's own layout, points the programs' RUNPATH at them ($ORIGIN-relative) and adds the
# wheels' license files to /opt/mpibert/share/doc/mpibert/wheels (cmake/mpibertInstall.cmake,
# cmake/install_wheel_libraries.cmake: the same for any prefix). tools/container/build_image.sh and the
# Containerfile's from-source stage run it.
#   tools/container/stage.sh BUILD_DIR DEST [cpu|all]
#     cpu (default): the wheel libraries the programs load: enough to run on CPU, and the CUDA
#                    libraries LibTorch links; all: every library of torch/lib and nvidia/*/lib
set -euo pipefail
build=${1:?usage: tools/container/stage.sh BUILD_DIR DEST [cpu|all]}
dest=${2:?usage: tools/container/stage.sh BUILD_DIR DEST [cpu|all]}
libs=${3:-cpu}
case "$libs" in cpu) wheel_libs=loaded ;; all) wheel_libs=all ;; *) echo "stage: cpu or all, not $libs" >&2; exit 2 ;; esac
prefix=/opt/mpibert
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
DESTDIR=$dest MPIBERT_INSTALL_WHEEL_LIBS=$wheel_libs cmake --install "$build" --prefix "$prefix" > "$dest.install.log" 2>&1 ||
  { cat "$dest.install.log"; exit 1; }
rm -f "$dest.install.log"
wheel=$dest$prefix/lib/mpibert/wheel
[ -d "$wheel/torch/lib" ] || { echo "stage: $wheel/torch/lib is missing: only a LibTorch from PyTorch's wheel is staged" >&2; exit 1; }
runpath=$(readelf -d "$dest$prefix/bin/mpibert" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
echo "stage: $prefix in $dest: $(find "$wheel" -name '*.so*' | wc -l) wheel libraries ($libs, $(du -sh "$wheel" | cut -f1)), RUNPATH $runpath"
