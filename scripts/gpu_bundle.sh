#!/usr/bin/env bash
# Packs what a bare GPU machine without network needs to run scripts/gpu_check.sh on binaries
# built here: the mpibert binaries the check runs (stripped) and the shared libraries they link
# that such a machine lacks (spdlog, fmt, utf8proc; see ../shared/gpu-image/README.md) or holds in
# another release (HDF5 and protobuf check at run time that they are the release compiled against).
# LibTorch, CUDA, NCCL and Open MPI are the machine's own: the same LibTorch wheel (2.11.0+cu130),
# and Open MPI's ABI is stable across 4.1.x.
#   scripts/gpu_bundle.sh DIR     (after bash scripts/build.sh; DIR inside the checkout travels
#                                  with it when .git/info/exclude or .gitignore names it)
# There: scripts/gpu_check.sh --bundle DIR
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: scripts/gpu_bundle.sh DIR" >&2; exit 2; }
out=$1
bin=${MPIBERT_BIN_DIR:-build/bin}
binaries=(mpibert mpibert-prep test_gpu)
for b in "${binaries[@]}"; do
  [ -x "$bin/$b" ] || { echo "gpu_bundle: $bin/$b not found: run bash scripts/build.sh first" >&2; exit 1; }
done
if ! ldd "$bin/mpibert" | grep -q libtorch_cuda; then
  echo "gpu_bundle: $bin/mpibert is not linked with LibTorch's CUDA library: build against a CUDA LibTorch" >&2; exit 1
fi
rm -rf "$out.tmp"
mkdir -p "$out.tmp/bin" "$out.tmp/lib"
for b in "${binaries[@]}"; do strip -o "$out.tmp/bin/$b" "$bin/$b"; done
# The libraries the GPU image lacks, as the binaries resolve them here (real files, by soname).
for soname in libspdlog.so libfmt.so libutf8proc.so libhdf5_serial.so libsz.so libaec.so libprotobuf.so; do
  path=$(ldd "$bin/mpibert" | awk -v s="$soname" 'index($1, s) == 1 { print $3 }')
  [ -n "$path" ] || { echo "gpu_bundle: mpibert links no $soname" >&2; exit 1; }
  cp -L "$path" "$out.tmp/lib/$(basename "$path")"
done
{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME")"
} > "$out.tmp/BUNDLE"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "gpu_bundle: $(du -sh "$out" | cut -f1) in $out"
