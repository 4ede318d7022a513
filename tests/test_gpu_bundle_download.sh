#!/usr/bin/env bash
# scripts/gpu_bundle.sh --no-binaries's download of the Debian packages (needs Debian's archive):
# apt-get download must run in a folder that no other user can write (an apt-get ahead of the real
# one on PATH records the modes of its folder and the folder above, then runs the real one), and
# the bundle must come out writable by its owner alone, its BUNDLE naming each package file of
# debs/, and no other, with its SHA-256 as the file has it and as apt's index gives it.
# ctest gpu_bundle.download; a few seconds.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v apt-get > /dev/null || { echo "SKIPPED: no apt-get: the bundle's packages come from Debian's archive"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-gpu-bundle-download.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

real=$(command -v apt-get)
mkdir "$work/shim"
cat > "$work/shim/apt-get" <<EOF
#!/usr/bin/env bash
# apt-get download (not --print-uris): where it writes, and the folder above.
if [ "\${1:-}" = download ] && [[ " \$* " != *" --print-uris "* ]]; then
  stat -L -c '%a %U %n' "\$PWD" "\$PWD/.." >> "$work/download-dirs.txt"
fi
exec "$real" "\$@"
EOF
chmod +x "$work/shim/apt-get"
PATH=$work/shim:$PATH bash "$root/scripts/gpu_bundle.sh" --no-binaries "$work/bundle"

[ -s "$work/download-dirs.txt" ] || fail "gpu_bundle.sh ran no apt-get download through PATH"
echo "apt-get download ran in (mode, owner, path):"; sed 's/^/  /' "$work/download-dirs.txt"
while read -r mode owner path; do
  (( (8#$mode & 8#002) == 0 )) || fail "apt-get download ran where every user can write: $path, mode $mode"
  [ "$owner" = "$(id -un)" ] || fail "apt-get download ran in $path, owned by $owner, not by $(id -un)"
done < "$work/download-dirs.txt"

writable=$(find "$work/bundle" -perm -o+w ! -type l)
[ -z "$writable" ] || fail "the bundle has paths every user can write: $writable"
[ "$(head -n 1 "$work/bundle/BUNDLE")" = "mpibert GPU bundle (scripts/gpu_bundle.sh)" ] || fail "BUNDLE lacks its marker line"
listed=$(awk '$1 == "deb" { print $3 }' "$work/bundle/BUNDLE" | sort | tr '\n' ' ')
present=$(cd "$work/bundle/debs" && ls -A | sort | tr '\n' ' ')
[ -n "$listed" ] || fail "BUNDLE names no package: $(cat "$work/bundle/BUNDLE")"
[ "$listed" = "$present" ] || fail "BUNDLE names $listed; debs/ holds $present"
# apt's own record of each package (its candidate version, which apt-get download fetches).
declare -A indexed=()
packages=()
for f in "$work/bundle"/debs/*.deb; do packages+=("$(dpkg-deb -f "$f" Package)"); done
while read -r package hash; do indexed[$package]=$hash; done \
  < <(apt-cache show --no-all-versions "${packages[@]}" | awk '/^Package: / { p = $2 } /^SHA256: / { print p, $2 }')
while read -r kind hash name; do
  [ "$kind" = deb ] || continue
  file=$work/bundle/debs/$name
  got=$(sha256sum < "$file" | cut -d' ' -f1)
  [ "$got" = "$hash" ] || fail "$name: SHA-256 $got, BUNDLE says $hash"
  package=$(dpkg-deb -f "$file" Package)
  [ "${indexed[$package]:-}" = "$hash" ] || fail "$name: BUNDLE's SHA-256 $hash, apt's index ${indexed[$package]:-none}"
done < "$work/bundle/BUNDLE"
echo "the bundle: $(echo "$listed" | wc -w) packages, each with apt's SHA-256 in BUNDLE; nothing writable by others"
echo "gpu_bundle.download: passed in $(( $(date +%s) - start )) s"
