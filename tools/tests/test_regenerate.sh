#!/usr/bin/env bash
# The committed reports regenerate byte for byte from the committed data with the code in tools/:
# results/reference's table, comparison.md and plots (tools/reference.sh --render-only, on a copy of
# the runs) and the scaling model's check and projection (tools/scaling-model all --out elsewhere).
# A difference means the code changed what it writes: re-render and commit the files with it.
# Needs /usr/bin/python3 with python3-matplotlib; about 15 s.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-regenerate.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failed=0

same() {  # COMMITTED REGENERATED
  if cmp -s "$1" "$2"; then
    echo "same: ${1#"$root"/}"
  else
    echo "FAIL: ${1#"$root"/} differs from what the code writes now ($2)"
    failed=1
  fi
}

cp -r "$root/results/reference" "$tmp/reference"
bash "$root/tools/reference.sh" --render-only "$tmp/reference" > /dev/null
for file in table.md comparison.md loss.png scaling.png phases.png memory.png; do
  same "$root/results/reference/$file" "$tmp/reference/$file"
done

"$root/tools/scaling-model" all --out "$tmp/scaling_model" > /dev/null
for file in check.md check.png projection.md projection.png projection-memory.png; do
  same "$root/results/scaling_model/$file" "$tmp/scaling_model/$file"
done
exit $failed
