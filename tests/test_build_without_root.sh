#!/usr/bin/env bash
# The README's build on a machine where install-deps can install nothing system-wide, played here:
# in private mount and network namespaces, dpkg, apt and sudo are gone (removed in an overlay of
# /usr/bin), every file of Debian's spdlog, fmt, CLI11, nlohmann-json, utf8proc and PCRE2 (-dev) packages is
# hidden (overlays on /usr/include, /usr/lib/x86_64-linux-gnu and /usr/share), the CUDA toolkit too
# (a tmpfs over each /usr/local/cuda-*: a CPU box, or a login node before `module load cuda`), and
# there is no network but loopback. As an unprivileged user (nobody), in a copy of the working tree whose .venv
# is this checkout's (read only: torch and the tools are already there),
#   bash scripts/install-deps.sh && bash scripts/build.sh mpibert-prep bench_allreduce
# must then take the way without root (never sudo or apt), name the six libraries as to be built
# from their pinned releases, and the build must build them from the release archives and link
# them statically: mpibert-prep prepares a SQuAD article and bench_allreduce all-reduces on one
# rank with the system copies still hidden, and no object was compiled from a header outside the
# pinned releases; the CUDA and NCCL code is built from the PyTorch wheel alone (configure says so,
# bench_allreduce names LibTorch 2.11 and NCCL, scripts/check_runpath.py: every library resolves,
# the CUDA ones from the wheel's folders, none from /usr/local/cuda).
# The two programs are what the way without root changes: mpibert-prep links the text and data
# layers (all six libraries), bench_allreduce the LibTorch, MPI and NCCL layers (comm, runtime).
# The layers above them take their headers and libraries through the same CMake targets; the
# main build compiles them (and build.install installs and runs them), so the test does not
# compile them a second time.
#
# The network's stand-in: the release archives of cmake/pinned_dependencies.cmake in a local folder,
# MPIBERT_DEPENDENCY_ARCHIVES (default BUILD/dependency-archives), handed to install-deps.sh and the
# build as a site without network would. The folder is filled once, from Debian's archive, where
# the network is reachable (each archive checked against its SHA-256); with neither the archives
# there nor the network, the test is skipped (exit 77) saying so.
# Registered in ctest as build.without_root; needs root for the namespaces (exit 77 without it).
# The build reuses what the main build compiled where the compiler's input is the same: the ccache
# of the user running the test (root's, which scripts/build.sh filled) is offered to nobody read
# only, mounted in the namespace, and scripts/build.sh hashes paths relative to the checkout, so
# the copy's paths hash as the checkout's. Only a compilation that includes none of the six
# libraries can hit (protobuf's generated code): every layer's object includes spdlog, whose Debian
# headers are patched (tweakme.h, fmt/fmt.h) and used with other defines (SPDLOG_SHARED_LIB,
# FMT_SHARED). The test prints how many compilations hit.
#   tests/test_build_without_root.sh   (KEEP_TMP=1 keeps the temporary directory)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: hiding packages, tools and the network needs mount and network namespaces, which need root; CI runs as root"; exit 77; }
python=${MPIBERT_PYTHON:-$root/.venv/bin/python3}
[ -x "$python" ] || fail "$python missing (bash scripts/install-deps.sh)"
venv=$(cd "$(dirname "$python")/.." && pwd)
archives=${MPIBERT_DEPENDENCY_ARCHIVES:-$root/build/dependency-archives}
# The main build's compiler cache, offered to nobody read only (none where ccache is not installed).
ccache_dir=""
if command -v ccache > /dev/null; then
  ccache_dir=$(ccache -k cache_dir 2> /dev/null || true)
  [ -d "$ccache_dir" ] || ccache_dir=""
fi
start=$(date +%s)

# The archives, from the network when they are not in the folder yet.
if ! cmake -DMPIBERT_DEPENDENCY_ARCHIVES="$archives" -P "$root/cmake/pinned_dependencies.cmake" > "$archives.log" 2>&1; then
  cat "$archives.log"
  echo "SKIPPED: the pinned release archives are neither all in $archives nor downloadable (no network to deb.debian.org?):" \
       "put them there (cmake/pinned_dependencies.cmake names them) or set MPIBERT_DEPENDENCY_ARCHIVES"
  exit 77
fi
sed 's/^/archives: /' "$archives.log"

work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-without-root.XXXXXX")
if [ "${KEEP_TMP:-0}" = 1 ]; then echo "keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
chmod 755 "$work"
# The working tree as it is (tracked and untracked files, not the ignored ones), and its .venv.
mkdir "$work/src" "$work/home" "$work/tmp"
(cd "$root" && git ls-files -z -co --exclude-standard | tar --null --ignore-failed-read -T - -cf - 2> /dev/null) | tar -xf - -C "$work/src"
ln -sfn "$venv" "$work/src/.venv"  # (a worktree's .venv may be a link, which .gitignore's .venv/ lets through)
chown -R nobody:nogroup "$work/src" "$work/home" "$work/tmp"

packages=(libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev libutf8proc-dev libutf8proc2 libpcre2-dev)
for p in "${packages[@]}"; do dpkg -L "$p" 2> /dev/null || true; done | { grep -v '^/usr/share/doc' || true; } > "$work/hide.list"
[ -s "$work/hide.list" ] || fail "none of ${packages[*]} is installed here: nothing to hide"
# The Python environment and its interpreter must be reachable for nobody: where a folder above
# them is closed to others (/root, as pyenv's), the namespace opens that folder with them alone.
reach=("$(cd "$venv" && pwd -P)" "$(realpath "$("$python" -c 'import sys; print(sys.base_prefix)')")")

cat > "$work/inside.sh" <<'INSIDE'
set -euo pipefail
root=$1 work=$2 archives=$3 ccache_dir=$4
shift 4
mkdir "$work/overlay" "$work/stage"
mount -t tmpfs -o size=16m tmpfs "$work/overlay"
for dir in /usr/include /usr/lib/x86_64-linux-gnu /usr/share /usr/bin; do
  name=$(echo "$dir" | tr / _)
  mkdir "$work/overlay/$name.upper" "$work/overlay/$name.work"
  mount -t overlay overlay -o "lowerdir=$dir,upperdir=$work/overlay/$name.upper,workdir=$work/overlay/$name.work" "$dir"
done
overlaid() { case $1 in /usr/include/?* | /usr/lib/x86_64-linux-gnu/?* | /usr/share/?* | /usr/bin/?*) return 0 ;; esac; return 1; }
while read -r path; do
  path=${path#/.}
  if [ -L "$path" ] || [ -f "$path" ]; then
    overlaid "$path" || { echo "$path is outside the overlays: it cannot be hidden"; exit 1; }
    rm -f "$path"
  fi
done < "$work/hide.list"
tac "$work/hide.list" | while read -r path; do
  if overlaid "$path" && [ -d "$path" ] && [ -z "$(ls -A "$path")" ]; then rmdir "$path"; fi
done
for header in spdlog/spdlog.h fmt/format.h CLI/CLI.hpp nlohmann/json.hpp utf8proc.h pcre2.h; do
  if echo "#include <$header>" | g++ -x c++ -E - > /dev/null 2>&1; then echo "the compiler still finds <$header>"; exit 1; fi
done
for tool in dpkg dpkg-query apt apt-get apt-cache sudo; do rm -f "/usr/bin/$tool"; done
for tool in dpkg dpkg-query apt-get sudo; do
  ! command -v "$tool" > /dev/null || { echo "$tool is still on PATH: $(command -v "$tool")"; exit 1; }
done
echo "hidden: $(wc -l < "$work/hide.list") paths of Debian's spdlog, fmt, CLI11, nlohmann-json, utf8proc and PCRE2; dpkg, apt, sudo"
# No CUDA toolkit either, as on a login node before `module load cuda`: the CUDA runtime, its
# headers and NCCL come from the PyTorch wheel alone.
for toolkit in /usr/local/cuda-*; do
  if [ -d "$toolkit" ]; then mount -t tmpfs -o size=1m tmpfs "$toolkit"; fi
done
if nvcc --version > /dev/null 2>&1 || [ -e /usr/local/cuda/include/cuda_runtime_api.h ]; then
  echo "the CUDA toolkit is still visible"; exit 1
fi
echo "hidden: the CUDA toolkit (nvcc runs no more, /usr/local/cuda/include is empty)"
# The main build's ccache, read only (mounted before a tmpfs below may cover the folder it is in):
# nobody's compilations look their results up there (their own are not kept), and the log says
# which hit.
cache=()
if [ -n "$ccache_dir" ]; then
  mkdir "$work/ccache"
  mount --bind "$ccache_dir" "$work/ccache"
  mount -o remount,bind,ro "$work/ccache"
  setpriv --reuid=nobody --regid=nogroup --clear-groups test -r "$work/ccache" ||
    { echo "nobody cannot read the ccache $ccache_dir"; exit 1; }
  cache=(CCACHE_DIR="$work/ccache" CCACHE_READONLY=1 CCACHE_NOSTATS=1 CCACHE_TEMPDIR="$work/tmp/ccache"
         CCACHE_LOGFILE="$work/tmp/ccache.log")
  echo "ccache: $ccache_dir, read only as $work/ccache"
fi
# Folders closed to others above what nobody must reach: opened with those alone inside.
blocked=()
for path in "$@"; do
  # The highest folder above `path` that nobody cannot enter.
  dir=""
  for part in $(echo "${path#/}" | tr / ' '); do
    dir=$dir/$part
    [ "$dir" != "$path" ] || break
    if ! setpriv --reuid=nobody --regid=nogroup --clear-groups test -x "$dir" 2> /dev/null; then
      blocked+=("$dir")
      break
    fi
  done
done
if [ ${#blocked[@]} -gt 0 ]; then
  i=0
  for path in "$@"; do mkdir "$work/stage/$i"; mount --bind "$path" "$work/stage/$i"; i=$((i + 1)); done
  for dir in $(printf '%s\n' "${blocked[@]}" | sort -u); do mount -t tmpfs -o mode=755 tmpfs "$dir"; done
  i=0
  for path in "$@"; do mkdir -p "$path"; mount --bind "$work/stage/$i" "$path"; i=$((i + 1)); done
  echo "opened for nobody: $* (in tmpfs over $(printf '%s\n' "${blocked[@]}" | sort -u | tr '\n' ' '))"
fi
ip link set lo up
interfaces=$(awk 'NR > 2 { sub(":", "", $1); print $1 }' /proc/net/dev | tr '\n' ' ')
[ "$interfaces" = "lo " ] || { echo "network interfaces in the namespace: $interfaces"; exit 1; }
echo "network: loopback only; the release archives come from $archives"

as_nobody() {
  setpriv --reuid=nobody --regid=nogroup --clear-groups \
    env -i HOME="$work/home" TMPDIR="$work/tmp" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
    MPIBERT_DEPENDENCY_ARCHIVES="$archives" "${cache[@]}" "$@"
}
cd "$work/src"
as_nobody bash -c 'bash scripts/install-deps.sh' > "$work/install-deps.log" 2>&1 ||
  { cat "$work/install-deps.log"; echo "install-deps.sh as nobody failed (above)"; exit 1; }
cat "$work/install-deps.log"
as_nobody bash scripts/build.sh mpibert-prep bench_allreduce > "$work/build.out" 2>&1 ||
  { cat "$work/build.out"; echo "build.sh as nobody failed (above)"; exit 1; }
cat "$work/build.out"
as_nobody build/bin/mpibert-prep split data_prep/data/squad/dev-v1.1.json.gz --articles 0:1 --out "$work/tmp/article.json" \
  > "$work/prep.txt" 2>&1 || { cat "$work/prep.txt"; echo "mpibert-prep split failed"; exit 1; }
as_nobody build/bin/mpibert-prep --input "$work/tmp/article.json" --vocab data_prep/data/bert-base-uncased/vocab.txt \
  --out "$work/tmp/shards" --split train --max-seq-length 128 --doc-stride 64 --log-level warn >> "$work/prep.txt" 2>&1 ||
  { cat "$work/prep.txt"; echo "mpibert-prep failed"; exit 1; }
as_nobody build/bin/bench_allreduce --backend mpi --min-bytes 1K --max-bytes 1K --warmup 1 --iters 2 > "$work/allreduce.txt" 2>&1 ||
  { cat "$work/allreduce.txt"; echo "bench_allreduce failed"; exit 1; }
echo "as nobody, the system copies hidden: mpibert-prep prepared a SQuAD article; bench_allreduce: $(grep -m1 '^# LibTorch' "$work/allreduce.txt")"
ldd build/bin/bench_allreduce build/bin/mpibert-prep > "$work/ldd.txt"
# Every library resolves with the toolkit hidden, the CUDA ones from the wheel's folders.
for program in bench_allreduce mpibert-prep; do /usr/bin/python3 "$root/scripts/check_runpath.py" "build/bin/$program"; done
INSIDE
unshare --mount --net --propagation private bash "$work/inside.sh" "$root" "$work" "$archives" "$ccache_dir" "${reach[@]}" ||
  fail "the build without root failed (above)"

# Outside again: how install-deps went, and what the build was made of.
src=$work/src
log=$work/install-deps.log
grep -q "^install-deps: without root or apt (no apt-get or dpkg-query here)" "$log" || fail "install-deps.sh did not take the way without root: $(head -3 "$log")"
for name in fmt spdlog CLI11 nlohmann_json utf8proc pcre2; do
  grep -q "^install-deps: build: $name " "$log" || fail "install-deps.sh did not name $name as to be built ($log)"
  grep -q "building $name .* from its pinned release" "$src/build.log" || fail "the build did not build $name from its pinned release"
done
grep -q "^install-deps: what the build needs is here" "$log" || fail "install-deps.sh did not end with what the build needs present"
# The CUDA code built from the wheel alone: its runtime, NCCL, and nothing of /usr/local/cuda.
grep -q "CUDA 13.0 runtime from .*nvidia.*(no CUDA toolkit needed)" "$src/build.log" \
  || fail "configure did not take the CUDA runtime from the wheel"
grep -q "NCCL backend ON" "$src/build.log" || fail "the NCCL backend was not built without the toolkit"
grep -q -E "^# LibTorch 2\.11[.0-9a-z+]*, NCCL [0-9]+\.[0-9]+\.[0-9]+$" "$work/allreduce.txt" ||
  fail "bench_allreduce, built without the toolkit, names the wrong LibTorch or no NCCL: $(grep '^# LibTorch' "$work/allreduce.txt" || head -3 "$work/allreduce.txt")"
grep -q "Out of bounds values : 0 OK" "$work/allreduce.txt" || fail "bench_allreduce's all-reduce was wrong: $(tail -3 "$work/allreduce.txt")"
[ -s "$work/tmp/shards/manifest.json" ] || fail "mpibert-prep wrote no manifest in $work/tmp/shards"
if grep -q "/usr/local/cuda" "$work/ldd.txt"; then fail "a program links a library of /usr/local/cuda"; fi
if grep -E -q "lib(spdlog|fmt|utf8proc|pcre2-32)\.so" "$work/ldd.txt"; then
  fail "a program loads a shared spdlog, fmt, utf8proc or PCRE2: $(grep -E "lib(spdlog|fmt|utf8proc|pcre2-32)" "$work/ldd.txt" | head -1)"
fi
# The headers each object was compiled from (ninja's log of the compiler's dependency files; ninja
# names those below the build folder relative to it).
# system-fmt/ is the link that puts fmt ahead of LibTorch's copy (cmake/mpibertDependencies.cmake):
# it must lead to the pinned fmt.
(cd "$src/build" && ninja -t deps) > "$work/deps.txt"
case $(realpath "$src/build/system-fmt/fmt") in "$src/build/_deps/"*) ;; *) fail "build/system-fmt/fmt leads to $(realpath "$src/build/system-fmt/fmt")" ;; esac
for header in spdlog/spdlog.h fmt/format.h CLI/CLI.hpp nlohmann/json.hpp utf8proc.h pcre2.h; do
  elsewhere=$(grep "/$header\$" "$work/deps.txt" | grep -v -E "^ *($src/build/)?(_deps|system-fmt)/" || true)
  [ -z "$elsewhere" ] || fail "an object was compiled from a $header outside the pinned releases: $(echo "$elsewhere" | head -1)"
  grep -q -E "^ *($src/build/)?_deps/.*/$header\$" "$work/deps.txt" || fail "no object includes the pinned $header"
done
hits="no ccache"
if [ -f "$work/tmp/ccache.log" ]; then
  hits="$(grep -c -E 'Result: (direct|preprocessed)_cache_hit' "$work/tmp/ccache.log" || true) of them hits in the main build's ccache"
fi
echo "build.without_root: $(( $(date +%s) - start )) s (the build: $(grep -c 'Building' "$src/build.log") compilations, $hits)"
