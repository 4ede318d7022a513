#!/usr/bin/env bash
# Packs what a bare GPU machine without network needs (see ../shared/gpu-image/README.md) to run
# scripts/gpu_check.sh, on binaries built here or on a build of its own:
#   - bin/ and lib/: the mpibert binaries the check runs (stripped) and the shared libraries they
#     link that such a machine lacks (spdlog, fmt, utf8proc) or holds in another release (HDF5 and
#     protobuf check at run time that they are the release compiled against); about 14 MB.
#     LibTorch, CUDA, NCCL and Open MPI are the machine's own: the same LibTorch wheel
#     (2.11.0+cu130), and Open MPI's ABI is stable across 4.1.x.
#   - debs/: the Debian 12 packages of what the GPU image lacks to build mpibert from source
#     (spdlog, CLI11, nlohmann-json, utf8proc), fetched with apt-get download into a folder no
#     other user can write; under 1 MB. spdlog's own dependencies are the image's (fmt 9.1);
#     libspdlog-dev's dependency on catch2 is Debian's packaging, not needed to build.
#     gpu_check.sh --build unpacks exactly the packages BUNDLE names, each checked against the
#     SHA-256 recorded there (apt's, from Debian's signed indexes), with dpkg -x into its build
#     directory and builds there against the machine's PyTorch and CUDA toolkit.
#   - BUNDLE: the manifest (first line the marker below; the commit, the date, the binaries; one
#     line "deb SHA256 FILE" per package).
# DIR is made afresh; an existing DIR is replaced only when it is a bundle made here (BUNDLE's
# marker) holding nothing else, and refused otherwise (`gpu_bundle.sh build` must not remove the
# build tree). The bundle is left writable by its owner alone.
#   scripts/gpu_bundle.sh [--no-binaries | --no-debs] DIR
#     (default)      both (binaries after bash scripts/build.sh)
#     --no-binaries  debs/ only: for a build there; nothing needs to be built here
#     --no-debs      bin/ and lib/ only (the bundle of before the source build)
# To the lent GPU machine (the device tool): it copies the checkout's tracked files and the
# untracked ones git does not ignore; an ignored folder (gpu-bundle/ is, in .gitignore) goes only
# when the call names it in `carry`. The call (docs/gpus.md, "The one call"):
#   run(command="bash scripts/gpu_check.sh --bundle gpu-bundle --deadline 420 --out $OUT/gpu-check",
#       carry=["gpu-bundle"], timeout_s=480)
# There: scripts/gpu_check.sh --bundle DIR [--build | --build-only] (that script's header).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/gpu_bundle.sh [--no-binaries | --no-debs] DIR"
binaries=1
debs=1
while [ $# -gt 1 ]; do
  case $1 in
    --no-binaries) binaries=0; shift ;;
    --no-debs) debs=0; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
if [ $# -ne 1 ] || [ "${1#-}" != "$1" ]; then echo "$usage" >&2; exit 2; fi
[ $binaries = 1 ] || [ $debs = 1 ] || { echo "gpu_bundle: --no-binaries and --no-debs leave nothing to pack" >&2; exit 2; }
out=$1
marker="mpibert GPU bundle (scripts/gpu_bundle.sh)"
# Checked before anything is made: DIR is replaced only when it is a bundle of this script's with
# nothing of anyone else's in it.
if [ -e "$out" ] || [ -L "$out" ]; then
  if [ ! -d "$out" ] || [ ! -f "$out/BUNDLE" ] || [ "$(head -n 1 "$out/BUNDLE")" != "$marker" ]; then
    echo "gpu_bundle: $out exists and is not a bundle made by scripts/gpu_bundle.sh (no BUNDLE starting \"$marker\"): left as it is; name a new folder, or remove it yourself" >&2
    exit 1
  fi
  others=$(cd "$out" && ls -A | grep -vxE 'BUNDLE|bin|lib|debs' | tr '\n' ' ' || true)
  if [ -n "$others" ]; then
    echo "gpu_bundle: $out is a bundle but also holds ${others% } (not the bundle's): left as it is; move them out, or name a new folder" >&2
    exit 1
  fi
fi
# What the GPU image lacks to build mpibert (CMakeLists.txt's find_package/find_path of them).
packages=(libspdlog-dev libspdlog1.10 libcli11-dev nlohmann-json3-dev libutf8proc-dev libutf8proc2)

bin=${MPIBERT_BIN_DIR:-build/bin}
programs=(mpibert mpibert-prep test_gpu bench_train)
if [ $binaries = 1 ]; then
  for b in "${programs[@]}"; do
    [ -x "$bin/$b" ] || { echo "gpu_bundle: $bin/$b not found: run bash scripts/build.sh first (or --no-binaries)" >&2; exit 1; }
  done
  # Not `ldd | grep -q`: grep's early exit fails ldd on SIGPIPE, and the pipeline under pipefail.
  if ! grep -q libtorch_cuda <<< "$(ldd "$bin/mpibert")"; then
    echo "gpu_bundle: $bin/mpibert is not linked with LibTorch's CUDA library: build against a CUDA LibTorch" >&2; exit 1
  fi
fi
# Made in a folder of its own beside DIR (mktemp: new, mode 0700), which then replaces DIR.
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d "$(dirname "$out")/.$(basename "$out").XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ $binaries = 1 ]; then
  mkdir -p "$tmp/bin" "$tmp/lib"
  for b in "${programs[@]}"; do strip -o "$tmp/bin/$b" "$bin/$b"; done
  # The libraries the GPU image lacks, as the binaries resolve them here (real files, by soname).
  for soname in libspdlog.so libfmt.so libutf8proc.so libhdf5_serial.so libsz.so libaec.so libprotobuf.so; do
    path=$(ldd "$bin/mpibert" | awk -v s="$soname" 'index($1, s) == 1 { print $3 }')
    [ -n "$path" ] || { echo "gpu_bundle: mpibert links no $soname" >&2; exit 1; }
    cp -L "$path" "$tmp/lib/$(basename "$path")"
  done
fi
if [ $debs = 1 ]; then
  command -v apt-get >/dev/null || { echo "gpu_bundle: apt-get not found: the packages come from Debian 12's archive (or --no-debs)" >&2; exit 1; }
  # apt-get download needs apt's package lists; a fresh container may have none yet.
  if ! apt-cache show "${packages[@]}" > /dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "gpu_bundle: apt's lists lack some of ${packages[*]}: apt-get update"
    $SUDO apt-get update -qq
  fi
  mkdir "$tmp/debs"
  # apt's name and SHA-256 of each package, from Debian's signed indexes: the manifest's hashes.
  apt-get download --print-uris -q "${packages[@]}" > "$tmp/apt-uris.txt" 2> "$tmp/apt-download.log" \
    || { cat "$tmp/apt-download.log" >&2; echo "gpu_bundle: apt-get download --print-uris ${packages[*]} failed (above)" >&2; exit 1; }
  # As root, apt downloads as its _apt user, which cannot write to a folder of root's alone; a
  # folder _apt can write is one others could fill with packages for gpu_check to unpack. So root
  # downloads itself (APT::Sandbox::User), into $tmp/debs, which no other user can reach.
  sandbox=()
  [ "$(id -u)" -ne 0 ] || sandbox=(-o APT::Sandbox::User=root)
  (cd "$tmp/debs" && apt-get download -q "${sandbox[@]}" "${packages[@]}" > ../apt-download.log 2>&1) \
    || { cat "$tmp/apt-download.log" >&2; echo "gpu_bundle: apt-get download ${packages[*]} failed (above)" >&2; exit 1; }
  : > "$tmp/debs.manifest"
  while read -r uri file size hash; do
    [ "${uri#\'}" != "$uri" ] || continue
    [ "${hash#SHA256:}" != "$hash" ] || { echo "gpu_bundle: apt gives no SHA-256 for $file ($hash)" >&2; exit 1; }
    [ -f "$tmp/debs/$file" ] || { echo "gpu_bundle: apt-get download left no $file in $tmp/debs" >&2; exit 1; }
    sum=$(sha256sum < "$tmp/debs/$file")
    [ "${sum%% *}" = "${hash#SHA256:}" ] || { echo "gpu_bundle: $file has SHA-256 ${sum%% *}, apt's index ${hash#SHA256:}" >&2; exit 1; }
    # apt writes an epoch's colon as %3a: names without it travel anywhere.
    name=$(sed 's/_[0-9]*%3a/_/' <<< "$file")
    [ "$name" = "$file" ] || mv "$tmp/debs/$file" "$tmp/debs/$name"
    echo "deb ${hash#SHA256:} $name" >> "$tmp/debs.manifest"
  done < "$tmp/apt-uris.txt"
  for p in "${packages[@]}"; do
    grep -q " ${p}_[^ ]*\.deb\$" "$tmp/debs.manifest" || { echo "gpu_bundle: apt-get download gave no ${p}_*.deb" >&2; exit 1; }
  done
fi
{
  echo "$marker"
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME")"
  if [ $binaries = 1 ]; then echo "binaries ${programs[*]}"; fi
  if [ $debs = 1 ]; then cat "$tmp/debs.manifest"; fi
} > "$tmp/BUNDLE"
rm -f "$tmp/apt-uris.txt" "$tmp/apt-download.log" "$tmp/debs.manifest"
# Readable by all (the bundle travels to machines where another user runs it), writable by its
# owner alone: gpu_check.sh refuses a bundle others can change.
chmod -R u+rwX,go+rX,go-w "$tmp"
rm -rf "$out"
mv "$tmp" "$out"
echo "gpu_bundle: $(du -sh "$out" | cut -f1) in $out$([ $debs = 1 ] && echo " (debs/ $(du -sh "$out/debs" | cut -f1))")"
