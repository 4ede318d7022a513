#!/usr/bin/env bash
# scripts/gpu_check.sh --bundle DIR --unpack-only, the step of --build that puts a bundle's Debian
# packages into BUILD/deps (their libraries then on LD_LIBRARY_PATH): on a bundle of small packages
# made here with dpkg-deb, it must unpack exactly the packages BUNDLE names, and refuse, with
# nothing of the intruder unpacked, a package whose SHA-256 differs from BUNDLE's (named, with both
# hashes), a .deb that BUNDLE does not name, a name that leads out of debs/, a BUNDLE without
# hashes, and a bundle that every user can write. Offline, a few seconds; ctest gpu_check.unpack.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v dpkg-deb > /dev/null || { echo "SKIPPED: dpkg-deb not found: the test makes Debian packages"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-gpu-unpack.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

# deb NAME FILE...: $work/debs-made/NAME_1.0_all.deb holding each FILE (a path under /usr).
deb() {
  local name=$1 tree=$work/tree-$1 f; shift
  rm -rf "$tree"
  mkdir -p "$tree/DEBIAN" "$work/debs-made"
  printf 'Package: %s\nVersion: 1.0\nArchitecture: all\nMaintainer: test <test@mpibert>\nDescription: test\n' "$name" > "$tree/DEBIAN/control"
  for f in "$@"; do mkdir -p "$tree/$(dirname "$f")"; echo "$name $f" > "$tree/$f"; done
  dpkg-deb --root-owner-group --build "$tree" "$work/debs-made/${name}_1.0_all.deb" > /dev/null
}
deb liba usr/include/a.h
deb libb usr/lib/x86_64-linux-gnu/libb.so.1
deb evil usr/lib/x86_64-linux-gnu/libevil.so.1
# A libb of the same name, holding the intruder's library.
deb libb usr/lib/x86_64-linux-gnu/libb.so.1 usr/lib/x86_64-linux-gnu/libevil.so.1
mkdir "$work/other"
mv "$work/debs-made/libb_1.0_all.deb" "$work/other/"
deb libb usr/lib/x86_64-linux-gnu/libb.so.1

# bundle DIR: a bundle of liba and libb as scripts/gpu_bundle.sh writes one.
bundle() {
  rm -rf "$1"
  mkdir -p "$1/debs"
  cp "$work/debs-made/liba_1.0_all.deb" "$work/debs-made/libb_1.0_all.deb" "$1/debs/"
  {
    echo "mpibert GPU bundle (scripts/gpu_bundle.sh)"
    echo "commit 0000000000000000000000000000000000000000"
    echo "built 2026-11-27T00:00:00Z on Debian GNU/Linux 12 (bookworm)"
    for f in liba libb; do echo "deb $(sha256sum < "$1/debs/${f}_1.0_all.deb" | cut -d' ' -f1) ${f}_1.0_all.deb"; done
  } > "$1/BUNDLE"
  chmod -R go-w "$1"
}
build=$work/build
# unpack NAME: gpu_check.sh --unpack-only on $work/NAME, its output in $work/NAME.log; its status.
unpack() {
  local rc=0
  bash "$root/scripts/gpu_check.sh" --bundle "$work/$1" --unpack-only --build-dir "$build" > "$work/$1.log" 2>&1 || rc=$?
  return $rc
}
# refused NAME PATTERN...: gpu_check must fail on bundle NAME with each PATTERN in its message,
# and no intruder's file may be anywhere in the build directory.
refused() {
  local name=$1 p; shift
  if unpack "$name"; then cat "$work/$name.log"; fail "$name: gpu_check unpacked it"; fi
  for p in "$@"; do grep -qF -- "$p" "$work/$name.log" || { cat "$work/$name.log"; fail "$name: the message does not say \"$p\""; }; done
  [ -z "$(find "$build" -name 'libevil*')" ] || fail "$name: the intruder's library was unpacked: $(find "$build" -name 'libevil*')"
  echo "refused, as it must: $name ($(grep -m1 'gpu_check: ' "$work/$name.log"))"
}

# The bundle as made: both packages, nothing else, in BUILD/deps.
bundle "$work/good"
unpack good || { cat "$work/good.log"; fail "gpu_check --unpack-only failed on a sound bundle"; }
got=$(cd "$build/deps" && find . -type f | sort | tr '\n' ' ')
[ "$got" = "./usr/include/a.h ./usr/lib/x86_64-linux-gnu/libb.so.1 " ] || fail "BUILD/deps holds $got, not the two packages' files"
[ "$(cat "$build/deps/usr/lib/x86_64-linux-gnu/libb.so.1")" = "libb usr/lib/x86_64-linux-gnu/libb.so.1" ] || fail "libb.so.1 is not the package's"
echo "a sound bundle: its 2 packages unpacked, nothing else"

# libb replaced by another valid package of the same file name.
bundle "$work/changed"
cp "$work/other/libb_1.0_all.deb" "$work/changed/debs/"
refused changed "$work/changed/debs/libb_1.0_all.deb" "$(sha256sum < "$work/other/libb_1.0_all.deb" | cut -d' ' -f1)" \
  "$(sha256sum < "$work/debs-made/libb_1.0_all.deb" | cut -d' ' -f1)"
# A package BUNDLE does not name.
bundle "$work/extra"
cp "$work/debs-made/evil_1.0_all.deb" "$work/extra/debs/"
refused extra "$work/extra/debs/evil_1.0_all.deb" "not in $work/extra/BUNDLE"
# A name in BUNDLE that leads out of debs/.
bundle "$work/outside"
cp "$work/debs-made/evil_1.0_all.deb" "$work/outside/"
echo "deb $(sha256sum < "$work/debs-made/evil_1.0_all.deb" | cut -d' ' -f1) ../evil_1.0_all.deb" >> "$work/outside/BUNDLE"
refused outside "../evil_1.0_all.deb"
# A package BUNDLE names that is not there.
bundle "$work/missing"
rm "$work/missing/debs/liba_1.0_all.deb"
refused missing "$work/missing/debs/liba_1.0_all.deb missing"
# A BUNDLE without hashes (an older gpu_bundle.sh's).
bundle "$work/old"
grep -v '^deb ' "$work/old/BUNDLE" > "$work/old/BUNDLE.new"
echo "debs liba_1.0_all.deb libb_1.0_all.deb" >> "$work/old/BUNDLE.new"
mv "$work/old/BUNDLE.new" "$work/old/BUNDLE"
refused old "names no package with its SHA-256"
# Writable by others than its owner, anywhere in it: by every user (the manifest, the packages'
# folder, the bundle), by its group (a package deep inside); owned by another user (as root).
for what in BUNDLE debs bundle; do
  bundle "$work/writable-$what"
  chmod o+w "$work/writable-$what/$([ $what = bundle ] || echo $what)"
  refused "writable-$what" "writable by others than its owner"
done
bundle "$work/group-writable"
chmod g+w "$work/group-writable/debs/liba_1.0_all.deb"
refused group-writable "group-writable/debs/liba_1.0_all.deb is writable by others than its owner"
if [ "$(id -u)" -eq 0 ]; then
  bundle "$work/foreign"
  chown nobody "$work/foreign/debs/libb_1.0_all.deb"
  refused foreign "foreign/debs/libb_1.0_all.deb is writable by others than its owner, or not this user's"
fi
# A bundle of binaries: its programs and libraries are checked before anything of it runs, at any depth.
for what in bin/mpibert lib/libspdlog.so.1.10; do
  mkdir -p "$work/binaries/bin" "$work/binaries/lib"
  printf 'mpibert GPU bundle (scripts/gpu_bundle.sh)\n' > "$work/binaries/BUNDLE"
  printf '#!/bin/sh\n' > "$work/binaries/bin/mpibert"
  : > "$work/binaries/lib/libspdlog.so.1.10"
  chmod -R go-w "$work/binaries"
  chmod 755 "$work/binaries/bin/mpibert"
  chmod o+w "$work/binaries/$what"
  if (cd "$root" && bash scripts/gpu_check.sh --bundle "$work/binaries" > "$work/binaries.log" 2>&1); then
    fail "a bundle whose $what every user can write was run"
  fi
  grep -q "binaries/$what is writable by others than its owner" "$work/binaries.log" || { cat "$work/binaries.log"; fail "$what: not refused by name"; }
  echo "refused, as it must: a bundle whose $what every user can write"
  rm -rf "$work/binaries"
done
echo "gpu_check.unpack: passed in $(( $(date +%s) - start )) s"
