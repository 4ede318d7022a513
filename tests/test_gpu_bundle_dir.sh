#!/usr/bin/env bash
# scripts/gpu_bundle.sh DIR replaces DIR only when it is a bundle the script made (BUNDLE's marker
# line) holding nothing else: a folder of files, a file, a folder with a BUNDLE of someone else's
# and a bundle with a file added are each refused with a message naming DIR and left byte for
# byte as they were; a folder named DIR.tmp beside it is not touched; a bundle it made is replaced
# (two real --no-binaries bundles: needs Debian's archive). ctest gpu_bundle.dir; a few seconds.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v apt-get > /dev/null || { echo "SKIPPED: no apt-get: the bundle's packages come from Debian's archive"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-gpu-bundle-dir.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
marker="mpibert GPU bundle (scripts/gpu_bundle.sh)"
# snapshot DIR: every path under DIR with its type, mode and content hash.
snapshot() { (cd "$1" && find . -printf '%y %m %p\n' | sort && find . -type f -print0 | sort -z | xargs -0r sha256sum); }

# refused NAME: gpu_bundle.sh on $work/NAME must fail, say why, and leave it as it was.
refused() {
  local dir=$work/$1 before rc=0
  before=$(snapshot "$dir" 2> /dev/null || ls -l "$dir")
  bash "$root/scripts/gpu_bundle.sh" --no-binaries "$dir" > "$work/$1.log" 2>&1 || rc=$?
  [ $rc -ne 0 ] || { cat "$work/$1.log"; fail "gpu_bundle.sh took $dir"; }
  grep -q "gpu_bundle: $dir .*left as it is" "$work/$1.log" || { cat "$work/$1.log"; fail "$1: no message naming $dir"; }
  [ "$(snapshot "$dir" 2> /dev/null || ls -l "$dir")" = "$before" ] || fail "$1: $dir changed"
  echo "refused, as it must: $1 ($(head -n 1 "$work/$1.log"))"
}

# A folder of someone's files (a build tree, say).
mkdir -p "$work/build/bin"
echo "keep" > "$work/build/CMakeCache.txt"
echo "program" > "$work/build/bin/mpibert"
refused build
# A file.
echo "a file" > "$work/file"
refused file
# A BUNDLE that is not this script's.
mkdir "$work/other-bundle"
printf 'commit 123\nnotes\n' > "$work/other-bundle/BUNDLE"
refused other-bundle

# A bundle made by the script, beside a folder named as the old script's temporary one.
mkdir "$work/made.tmp"
echo "keep" > "$work/made.tmp/notes"
bash "$root/scripts/gpu_bundle.sh" --no-binaries "$work/made" > "$work/made.log" 2>&1 || { cat "$work/made.log"; fail "gpu_bundle.sh failed"; }
[ "$(head -n 1 "$work/made/BUNDLE")" = "$marker" ] || fail "the bundle's BUNDLE does not start with its marker"
[ "$(cat "$work/made.tmp/notes" 2> /dev/null)" = keep ] || fail "gpu_bundle.sh changed $work/made.tmp, a folder beside DIR"
[ -z "$(find "$work" -maxdepth 1 -name '.made.*')" ] || fail "gpu_bundle.sh left $(find "$work" -maxdepth 1 -name '.made.*')"
# With a file of someone's added: refused.
echo "mine" > "$work/made/notes.txt"
refused made
rm "$work/made/notes.txt"
# As it was made, with a stale package in debs/: replaced.
echo "stale" > "$work/made/debs/stale_1.0_all.deb"
first=$(sed -n 2,3p "$work/made/BUNDLE")
sleep 1  # a new "built" time
bash "$root/scripts/gpu_bundle.sh" --no-binaries "$work/made" > "$work/again.log" 2>&1 || { cat "$work/again.log"; fail "gpu_bundle.sh did not replace its own bundle"; }
[ ! -e "$work/made/debs/stale_1.0_all.deb" ] || fail "the bundle was not replaced: debs/stale_1.0_all.deb is still there"
[ "$(sed -n 2,3p "$work/made/BUNDLE")" != "$first" ] || fail "BUNDLE is the first bundle's"
echo "replaced, as it must: a bundle gpu_bundle.sh made"
echo "gpu_bundle.dir: passed in $(( $(date +%s) - start )) s"
