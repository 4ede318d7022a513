#!/usr/bin/env bash
# The tree that becomes the image's /opt/mpibert: `cmake --install BUILD` with DESTDIR=DEST and
# prefix /opt/mpibert, plus the torch wheel's shared libraries (LibTorch, and the CUDA libraries
# it links) under /opt/mpibert/lib/wheel in the wheel's own layout, so that their RUNPATHs
# ($ORIGIN/../../nvidia/...) still hold; mpibert's RUNPATH is rewritten from the build machine's
# .venv to those copies ($ORIGIN-relative). The wheels' license files go to
# /opt/mpibert/share/doc/mpibert/wheels. tools/container/build.sh and the Containerfile's
# from-source stage run it.
#   tools/container/stage.sh BUILD_DIR DEST [cpu|all]
#     cpu (default): the wheel libraries the programs load (ldd): enough to run on CPU, and the
#                    CUDA libraries LibTorch links; all: every library of torch/lib and nvidia/*/lib
set -euo pipefail
build=${1:?usage: tools/container/stage.sh BUILD_DIR DEST [cpu|all]}
dest=${2:?usage: tools/container/stage.sh BUILD_DIR DEST [cpu|all]}
libs=${3:-cpu}
prefix=/opt/mpibert
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
DESTDIR=$dest cmake --install "$build" --prefix "$prefix" > "$dest.install.log" 2>&1 ||
  { cat "$dest.install.log"; exit 1; }
rm -f "$dest.install.log"
bin=$dest$prefix/bin
wheel=$dest$prefix/lib/wheel

runpath() { readelf -d "$1" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p'; }
# The wheel's site-packages: the folder above the torch/lib that mpibert's RUNPATH names.
site=""
IFS=: read -ra entries <<< "$(runpath "$bin/mpibert")"
for entry in "${entries[@]}"; do
  [[ "$entry" == */torch/lib ]] && site=$(cd "$entry/../.." && pwd -P)
done
[ -n "$site" ] || { echo "stage: $bin/mpibert's RUNPATH names no torch/lib: only a LibTorch from PyTorch's wheel is staged" >&2; exit 1; }

# The libraries to copy, as paths below site-packages.
if [ "$libs" = all ]; then
  # libtorch_python is torch's Python extension: it needs a libpython the image does not have.
  mapfile -t wanted < <(cd "$site" && find torch/lib nvidia/*/lib -maxdepth 1 -name '*.so*' ! -name 'libtorch_python.so' \
    \( -type f -o -type l \) | sort)
else
  # ldd resolves through the installed programs' RUNPATH (still the build machine's .venv here);
  # the folders are resolved, not the files: a program asks for the name it was linked with.
  mapfile -t wanted < <(for program in "$bin"/*; do ldd "$program"; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    while read -r file; do echo "$(cd "$(dirname "$file")" && pwd -P)/$(basename "$file")"; done |
    sed -n "s|^$site/||p" | sort -u)
fi
[ ${#wanted[@]} -gt 0 ] || { echo "stage: no wheel library found below $site" >&2; exit 1; }
mkdir -p "$wheel"
(cd "$site" && cp --parents -P "${wanted[@]}" "$wheel/")

# RUNPATH: the build machine's wheel folders become the copies, relative to bin/.
for program in "$bin"/*; do
  old=$(runpath "$program")
  [ -n "$old" ] || continue
  new=()
  IFS=: read -ra entries <<< "$old"
  for entry in "${entries[@]}"; do
    real=$(cd "$entry" 2>/dev/null && pwd -P || echo "$entry")
    if [[ "$real" == "$site"/* ]]; then new+=("\$ORIGIN/../lib/wheel/${real#"$site"/}"); else new+=("$entry"); fi
  done
  patchelf --set-rpath "$(IFS=:; echo "${new[*]}")" "$program"
done

# Licenses of what was copied: torch's and those of the NVIDIA wheels.
docs=$dest$prefix/share/doc/mpibert/wheels
mkdir -p "$docs"
for info in "$site"/torch-*.dist-info "$site"/nvidia_*.dist-info; do
  [ -d "$info" ] || continue
  name=$(basename "$info" .dist-info)
  find "$info" -maxdepth 2 -type f \( -iname 'LICENSE*' -o -iname 'NOTICE*' -o -iname 'License.txt' \) |
    while read -r file; do mkdir -p "$docs/$name"; cp "$file" "$docs/$name/"; done
done
echo "stage: $prefix in $dest: ${#wanted[@]} wheel libraries ($libs, $(du -sh "$wheel" | cut -f1)), RUNPATH $(runpath "$bin/mpibert")"
